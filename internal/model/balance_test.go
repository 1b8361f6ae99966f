package model

import "testing"

// load-balance takes HAProxy 2.6's algorithms with their options, as the
// peer passes them on, and nothing HAProxy would read otherwise.
func TestBalanceOptions(t *testing.T) {
	for in, want := range map[string]string{
		"leastconn": "leastconn", "uri": "uri", "uri  len 10 depth 2 whole path-only": "uri len 10 depth 2 whole path-only",
		"url_param userid": "url_param userid", "url_param userid check_post": "url_param userid check_post",
		"hdr(Host) use_domain_only": "hdr(Host) use_domain_only", "hdr(X-Tenant)": "hdr(X-Tenant)",
		"random": "random", "random(3)": "random(3)", "rdp-cookie": "rdp-cookie", "rdp-cookie(mstshash)": "rdp-cookie(mstshash)",
	} {
		if got, err := balanceParser().parse(in); err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "leastconn x", "uri len", "uri len x", "uri depth 2 extra", "url_param", "url_param a;b",
		"url_param a check_post x", "hdr(Host) x", "hdr(a b)", "random(0)", "random(x)", "random(3) x", "rdp-cookie(a b)",
		"rdp-cookie()", "hash req.hdr(x)", "roundrobin\nserver x"} {
		if got, err := balanceParser().parse(bad); err == nil {
			t.Errorf("%q accepted as %q", bad, got)
		}
	}
}
