package model

import "strings"

// frontendSnippetSettings are the operator's frontend snippets. Like the
// global snippet they come from the ConfigMap alone: the http and https
// frontends serve every tenant, the stats listener is the operator's.
func frontendSnippetSettings() []Setting {
	return []Setting{
		globalSetting(Setting{
			Name: "frontend-config-snippet", Scopes: ScopeConfigMap, Example: "http-request deny if { src 203.0.113.0/24 }",
			Doc: "Raw HAProxy directives added to the http and https frontends, one per line, before Perimeter's own rules. Ignored unless --config-snippets enables frontend. A snippet haproxy -c rejects keeps the previous global settings in place, with an Event.",
		}, snippetParser(nil), func(g *Global, v []string) { g.FrontendSnippet = strings.Join(v, "\n") }),
		globalSetting(Setting{
			Name: "stats-config-snippet", Scopes: ScopeConfigMap, Example: "stats show-legends",
			Doc: "Raw HAProxy directives added to the stats frontend, one per line. Ignored unless --config-snippets enables stats.",
		}, snippetParser(nil), func(g *Global, v []string) { g.StatsSnippet = strings.Join(v, "\n") }),
	}
}
