package haproxy

// Reload reasons: a fixed vocabulary, so metrics stay bounded whatever the
// objects are called.
const (
	ReloadStart    = "start"    // first configuration of this HAProxy
	ReloadBackends = "backends" // backends added, removed or changed
	ReloadSlots    = "slots"    // a backend needs more server slots
	ReloadGlobal   = "global"   // ConfigMap-level settings
	ReloadFrontend = "frontend" // default backend, error pages, TCP services
	ReloadTLS      = "tls"      // https frontend: default certificate on/off, client CA
	ReloadRecovery = "recovery" // the live HAProxy fell behind the files
)

// ReloadReasons lists every reload reason, for metrics.
var ReloadReasons = []string{ReloadStart, ReloadBackends, ReloadSlots, ReloadGlobal, ReloadFrontend, ReloadTLS, ReloadRecovery}

// RuntimeKinds are the kinds of Runtime API commands, for metrics.
var RuntimeKinds = []string{"server", "map", "cert"}

// runtimeKinds counts one runtime change's commands by kind and result:
// when err is set, the commands of the kinds it touched count as errors.
func runtimeKinds(servers, maps int, tls map[string]int, err error) map[string]int {
	n := map[string]int{"server": servers, "map": maps + tls["map"], "cert": tls["cert"]}
	out := map[string]int{}
	for _, k := range RuntimeKinds {
		if n[k] == 0 {
			continue
		}
		res := "ok"
		if err != nil {
			res = "error"
		}
		out[k+"/"+res] = n[k]
	}
	return out
}
