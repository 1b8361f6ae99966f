package haproxy

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// featuresDesired has one backend per feature group of feat_backend.go.
func featuresDesired() *model.Desired {
	be := func(name string, f model.BackendFeatures) *model.Backend {
		return &model.Backend{
			Name: name, Namespace: "ns", Service: strings.Split(name, "_")[1], Port: "80",
			Balance: "roundrobin", Check: true, CheckInterval: 2 * time.Second, ForwardedFor: true, Slots: 2,
			Endpoints: []model.Endpoint{{Address: "198.18.60.10", Port: 8080}},
			Features:  f,
		}
	}
	var many []string
	for i := range 45 {
		many = append(many, "203.0.113."+strconv.Itoa(i)+"/32")
	}
	return &model.Desired{
		Global: model.Global{ProxyProtocol: "127.0.0.0/8 2001:db8::/32"},
		Backends: []*model.Backend{
			be("ns_health_80", model.BackendFeatures{
				CheckHTTP: model.HTTPCheck{Method: "HEAD", Path: "/healthz"}, TimeoutCheck: time.Second,
				TimeoutServer: 30 * time.Second, PodMaxconn: 50, AbortOnClose: true, Cookie: "SRV", SendProxy: "send-proxy-v2",
			}),
			be("ns_access_80", model.BackendFeatures{
				SrcIPHeader: "X-Real-IP", AllowList: model.CIDRList(strings.Join(many, " ")), DenyList: "2001:db8::/32",
			}),
			be("ns_auth_80", model.BackendFeatures{
				AuthRealm: "Protected Content", AuthUsers: "alice $6$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG.\nbob $6$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG.",
				RateLimit: model.RateLimit{Requests: 10, Period: 10 * time.Second, Size: 100000, Status: 429, Whitelist: "10.0.0.0/8"},
			}),
			be("ns_closed_80", model.BackendFeatures{Deny: 403}),
		},
		Maps: map[string]map[string]string{},
	}
}

func TestRenderBackendFeatures(t *testing.T) {
	r := goldenRenderer(Options{DisableIPv6: true})
	st, problems := desiredState(featuresDesired())
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	withSlots(emptyState(), st)
	cfg, err := r.config(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "features_backend.cfg", cfg)
	haproxyCheck(t, cfg, map[string]string{model.MapExact: "", model.MapPrefix: ""})
	for _, want := range []string{
		"option httpchk HEAD /healthz",
		"timeout server 30s",
		"default-server check inter 2s maxconn 50 send-proxy-v2",
		"cookie SRV dynamic indirect nocache insert",
		"http-request set-src hdr(X-Real-IP)",
		"http-request deny deny_status 403 unless PM_ALLOW",
		"http-request auth realm \"Protected Content\" unless { http_auth(ns_auth_80) }",
		"userlist ns_auth_80",
		"http-request deny deny_status 429 if { sc_http_req_rate(0) gt 10 }",
		"tcp-request connection expect-proxy layer4 if PM_PROXY_SOURCE",
		"http-request deny deny_status 403\n",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q", want)
		}
	}
}

// TestCheckedFeaturesFailClosed: values the model should never give are
// dropped, and a dropped security setting closes the backend.
func TestCheckedFeaturesFailClosed(t *testing.T) {
	var msgs []string
	reject := func(format string, args ...any) { msgs = append(msgs, format) }
	for _, f := range []model.BackendFeatures{
		{AllowList: "10.0.0.0/8 evil\nserver"},
		{DenyList: "not-a-cidr"},
		{SrcIPHeader: "X-Real-IP\" if TRUE"},
		{AuthRealm: "a\"b", AuthUsers: "u $6$x$y"},
		{AuthRealm: "ok", AuthUsers: "u pass word"},
		{RateLimit: model.RateLimit{Requests: 5, Period: time.Second, Size: 10, Status: 302}},
	} {
		got := checkedFeatures(f, reject)
		if got.Deny != 503 {
			t.Errorf("%+v: deny %d, want 503 (fail closed)", f, got.Deny)
		}
	}
	got := checkedFeatures(model.BackendFeatures{Cookie: "a b", CheckHTTP: model.HTTPCheck{Method: "GET", Path: "/x#y"}}, reject)
	if got.Deny != 0 || got.Cookie != "" || got.CheckHTTP.Path != "" {
		t.Errorf("non-security values: got %+v, want dropped without closing", got)
	}
}
