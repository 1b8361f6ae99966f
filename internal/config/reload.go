package config

// liveKeys are the keys a reload applies at once, each with how it copies
// its value. The daemon rebuilds its model options and log level from the
// Config after every reload (internal/app), which is what makes exactly
// these live; everything else is read once at start (listeners, informers,
// the BGP speaker, the status writer) and needs a restart.
var liveKeys = map[string]func(dst, src *Config){
	"log":                     func(d, s *Config) { d.Log = s.Log },
	"ingress.class":           func(d, s *Config) { d.IngressClass = s.IngressClass },
	"empty-ingress-class":     func(d, s *Config) { d.EmptyIngressClass = s.EmptyIngressClass },
	"default-backend-service": func(d, s *Config) { d.DefaultBackendService = s.DefaultBackendService },
	"default-ssl-certificate": func(d, s *Config) { d.DefaultSSLCertificate = s.DefaultSSLCertificate },
	"config-snippets":         func(d, s *Config) { d.ConfigSnippets = s.ConfigSnippets },
	"disable-config-snippets": func(d, s *Config) { d.DisableConfigSnippets = s.DisableConfigSnippets },
	"gateway-listener-ports":  func(d, s *Config) { d.GatewayListenerPorts = s.GatewayListenerPorts },
	"gateway-addresses":       func(d, s *Config) { d.GatewayAddresses = s.GatewayAddresses },
	"allow-cross-namespace-hosts": func(d, s *Config) {
		d.AllowCrossNamespaceHosts = s.AllowCrossNamespaceHosts
	},
}

// Change is one key whose value differs between two configurations.
type Change struct {
	Key      string
	From, To string
}

// Reload merges a configuration loaded on reload into the running one: the
// live keys take their new values, the others keep the running ones. It
// returns the merged configuration, the live changes it carries and the
// changes that wait for a restart (still listed on the next reload, since
// the running value is kept).
func Reload(running, loaded *Config) (next *Config, live, restart []Change) {
	n := *running
	n.values = make(map[string]string, len(running.values))
	for k, v := range running.values {
		n.values[k] = v
	}
	for _, k := range fileKeys() {
		if k.Alias != "" {
			continue
		}
		from, to := running.values[k.Name], loaded.values[k.Name]
		if from == to {
			continue
		}
		ch := Change{Key: k.Name, From: from, To: to}
		if set, ok := liveKeys[k.Name]; ok {
			set(&n, loaded)
			n.values[k.Name] = to
			live = append(live, ch)
		} else {
			restart = append(restart, ch)
		}
	}
	return &n, live, restart
}
