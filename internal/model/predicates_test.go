package model

import "testing"

// TestPredicatesAgreeWithParsers: what a setting's parser gives passes the
// exported predicate the driver re-checks it with, and a value the parser
// refuses does not.
func TestPredicatesAgreeWithParsers(t *testing.T) {
	for raw := range sendProxyKeywords {
		kw, err := sendProxyParser().parse(raw)
		if err != nil || !IsSendProxyKeyword(kw) {
			t.Errorf("send-proxy-protocol %q gives %q (%v), which the driver would drop", raw, kw, err)
		}
	}
	for _, raw := range []string{"HEAD /healthz", "OPTIONS /", "/ping"} {
		c, err := httpCheckParser().parse(raw)
		if err != nil || !IsHTTPCheckMethod(c.Method) {
			t.Errorf("check-http %q gives method %q (%v), which the driver would drop", raw, c.Method, err)
		}
	}
	for _, c := range []struct {
		name string
		pred func(string) bool
		p    parser[string]
		in   []string
	}{
		{"cookie", ValidCookieName, cookieNameParser(), []string{"SERVERID", "a.b_c-d", "", "a b", "x;y", string(make([]byte, 65))}},
		{"header", ValidHeaderName, headerNameParser(), []string{"X-Real-IP", "", "X_Real", "a:b"}},
		{"realm", ValidRealm, realmParser(), []string{"Protected Content", "", `x" y`, "a$b", "x # y"}},
	} {
		for _, in := range c.in {
			_, err := c.p.parse(in)
			if got := c.pred(in); got != (err == nil) {
				t.Errorf("%s %q: predicate %t, parser error %v", c.name, in, got, err)
			}
		}
	}
	if ValidUser("alice", "plain") || !ValidUser("alice", "$6$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG.") {
		t.Error("ValidUser disagrees with checkUser")
	}
}
