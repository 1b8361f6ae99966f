-- Request mirroring for HTTPRoute RequestMirror filters.
--
-- "http-request lua.perimeter-mirror <backend>" copies the request line,
-- the headers and the part of the body already in the buffer, and sends
-- the copy from a task of its own to one usable server of <backend>, so
-- the request itself is never delayed. The answer is read and thrown
-- away; every failure is ignored: a mirror never changes what the client
-- gets. The server is read from HAProxy's own view of the backend, so the
-- target follows the server addresses and states set through the Runtime
-- API without a reload.

-- Seconds a copy may take to connect, be sent and be answered.
local timeout = 1
-- Copies in flight at most: a slow mirror must not pile up tasks and
-- sockets without bound; the copies over it are dropped.
local max_inflight = 256
-- Seconds a backend's list of usable servers is kept before it is read
-- again: reading every server's state on every request costs too much.
local list_ttl = 1

-- Hop-by-hop and framing headers: the copy is framed on its own.
local skip = {
  ["connection"] = true, ["keep-alive"] = true, ["proxy-connection"] = true,
  ["te"] = true, ["trailer"] = true, ["transfer-encoding"] = true,
  ["upgrade"] = true, ["content-length"] = true, ["expect"] = true,
  ["http2-settings"] = true,
}

local inflight = 0
local lists = {}
local turns = {}

local function now()
  local t = core.now()
  return t.sec + t.usec / 1e6
end

-- usable lists the addresses ("ip:port") of the servers of backend name
-- that take traffic: ready and up, or ready without health checks.
local function usable(name)
  local t = now()
  local l = lists[name]
  if l and t - l.at < list_ttl then
    return l.addrs
  end
  local addrs = {}
  local be = core.backends[name]
  if be then
    for _, sv in pairs(be.servers) do
      local st = sv:get_stats()
      local s = st and st.status or ""
      if s:sub(1, 2) == "UP" or s == "no check" then
        addrs[#addrs + 1] = sv:get_addr()
      end
    end
    table.sort(addrs)
  end
  lists[name] = {at = t, addrs = addrs}
  return addrs
end

local function copy(txn)
  local method = txn.sf:method()
  local pathq = txn.sf:pathq()
  if not method or not pathq or pathq == "" then
    return nil
  end
  local parts = {method, " ", pathq, " HTTP/1.1\r\n"}
  local hdrs = txn.http:req_get_headers() or {}
  for name, values in pairs(hdrs) do
    if not skip[name] then
      local i = 0
      while values[i] ~= nil do
        parts[#parts + 1] = name .. ": " .. values[i] .. "\r\n"
        i = i + 1
      end
    end
  end
  local body = txn.sf:req_body() or ""
  if #body > 0 then
    parts[#parts + 1] = "content-length: " .. #body .. "\r\n"
  end
  parts[#parts + 1] = "connection: close\r\n\r\n"
  parts[#parts + 1] = body
  return table.concat(parts)
end

-- send delivers req and reads the answer away in pieces, so a large answer
-- costs no memory, until the server closes or the copy's time is up: the
-- socket's timeout counts per call, and a server trickling bytes would
-- otherwise hold the task for ever.
local function send(addr, req)
  local deadline = now() + timeout
  local s = core.tcp()
  s:settimeout(timeout)
  if s:connect(addr) and s:send(req) then
    while now() < deadline and s:receive(16384) do
    end
  end
  s:close()
end

core.register_action("perimeter-mirror", {"http-req"}, function(txn, name)
  if inflight >= max_inflight then
    return
  end
  local addrs = usable(name)
  if #addrs == 0 then
    return
  end
  local ok, req = pcall(copy, txn)
  if not ok or not req then
    return
  end
  local turn = (turns[name] or 0) % #addrs + 1
  turns[name] = turn
  local addr = addrs[turn]
  inflight = inflight + 1
  local registered = pcall(core.register_task, function()
    pcall(send, addr, req)
    inflight = inflight - 1
  end)
  if not registered then
    inflight = inflight - 1
  end
end, 1)
