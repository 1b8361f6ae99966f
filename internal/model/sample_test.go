package model

import (
	"strings"
	"testing"
)

func TestCheckSample(t *testing.T) {
	ok := []struct {
		expr string
		ctx  SampleContext
	}{
		{"hdr(User-Agent)", SampleRequest},
		{"req.hdr(host),lower", SampleRequest},
		{"req.hdr(x-forwarded-for,-1)", SampleRequest},
		{"cookie(id)", SampleResponse},
		{"src,ipmask(24,64),hex", SampleRequest},
		{"path,field(2,/)", SampleRequest},
		{"url_param(id,&),url_dec,length", SampleRequest},
		{"status", SampleResponse},
		{"res.hdr(content-type),word(1,/)", SampleResponse},
		{"date(3600),http_date", SampleResponse},
		{"ssl_fc,iif(https,http)", SampleRequest},
		{"hdr(host),lower()", SampleRequest},
	}
	for _, x := range ok {
		if err := checkSample(x.expr, x.ctx); err != nil {
			t.Errorf("%q refused: %v", x.expr, err)
		}
	}
	refused := []struct {
		expr string
		ctx  SampleContext
		why  string
	}{
		{"env(HOME)", SampleRequest, "not allowed"},
		{"hostname", SampleRequest, "not allowed"},
		{"var(proc.secret)", SampleRequest, "not allowed"},
		{"req.hdr(cookie),debug", SampleRequest, "not allowed"},
		{"req.hdr(cookie),set-var(txn.x)", SampleRequest, "not allowed"},
		{"path,lua.steal", SampleRequest, "not allowed"},
		{"src,table_gpc0(other-tenant)", SampleRequest, "not allowed"},
		{"src_http_req_rate(other-tenant)", SampleRequest, "not allowed"},
		{"sc0_http_req_rate", SampleRequest, "not allowed"},
		{"be_conn(other-tenant)", SampleRequest, "not allowed"},
		{"nbsrv(other-tenant)", SampleRequest, "not allowed"},
		{"path,map(/etc/passwd)", SampleRequest, "not allowed"},
		{"path,concat(,txn.x,)", SampleRequest, "not allowed"},
		{"res.hdr(server)", SampleRequest, "nothing to read in requests"},
		{"path", SampleResponse, "nothing to read in responses"},
		{"src,iif(a,b)", SampleRequest, "cannot take an address"},
		{"req.hdr(a b)", SampleRequest, "outside"},
		{"req.hdr(a'b)", SampleRequest, "outside"},
		{"req.hdr(host", SampleRequest, "without"},
		{"req.hdr(host)x", SampleRequest, "unexpected"},
		{"req.hdr(host),,lower", SampleRequest, "not a sample expression"},
		{"sha2", SampleRequest, "not allowed"}, // a converter is no fetch
		{"path,sha2(7)", SampleRequest, "want one of"},
		{"path,field(x,:)", SampleRequest, "not an integer"},
		{"path,field(1)", SampleRequest, "at least 2"},
		{"path,word(1,;)", SampleRequest, "separator"},
		{"path,lower(x)", SampleRequest, "at most 0"},
		{"path" + strings.Repeat(",lower", 9), SampleRequest, "converters"},
		{"", SampleRequest, "empty"},
	}
	for _, x := range refused {
		err := checkSample(x.expr, x.ctx)
		if err == nil || !strings.Contains(err.Error(), x.why) {
			t.Errorf("%q: error %v, want one saying %q", x.expr, err, x.why)
		}
	}
}

func TestSampleExamplesAccepted(t *testing.T) {
	for _, ctx := range []SampleContext{SampleRequest, SampleResponse} {
		ex := SampleExamples(ctx)
		if len(ex) < len(sampleConverters) {
			t.Fatalf("only %d examples", len(ex))
		}
		for _, e := range ex {
			if err := checkSample(e, ctx); err != nil {
				t.Errorf("example %q refused in context %d: %v", e, ctx, err)
			}
		}
	}
}

func TestHeaderFormat(t *testing.T) {
	for _, x := range []struct {
		in, format string
		samples    bool
	}{
		{"plain", "plain", false},
		{"100% sure", "100%% sure", false},
		{"100%% sure", "100%% sure", false},
		{"%", "%%", false},
		{"ip=%[src] host=%[req.hdr(host),lower]", "ip=%[src] host=%[req.hdr(host),lower]", true},
		{"%[src]%", "%[src]%%", true},
		{"a]b%{+Q}c", "a]b%%{+Q}c", false},
	} {
		f, s, err := parseHeaderFormat(x.in, SampleRequest)
		if err != nil || f != x.format || s != x.samples {
			t.Errorf("%q: got %q %t %v, want %q %t", x.in, f, s, err, x.format, x.samples)
			continue
		}
		if err := CheckHeaderFormat(f, SampleRequest); err != nil {
			t.Errorf("%q: its own format %q refused: %v", x.in, f, err)
		}
	}
	for _, in := range []string{"%[env(HOME)]", "%[src", "x %[status]", "%[req.hdr(host),debug]"} {
		if _, _, err := parseHeaderFormat(in, SampleRequest); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
	for _, f := range []string{"100% sure", "%ci", "%[env(HOME)]", "%{+Q}o"} {
		if err := CheckHeaderFormat(f, SampleRequest); err == nil {
			t.Errorf("renderer check accepted %q", f)
		}
	}
}
