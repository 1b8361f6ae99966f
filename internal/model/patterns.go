package model

import (
	"fmt"
	"strings"
)

// patternSettings take an address list that may instead name a pattern
// file, "patterns/<file>": the key <file> of --configmap-patternfiles, one
// address or CIDR per line, as the HAProxy Kubernetes Ingress Controller
// reads them.
var patternSettings = map[string]bool{"allow-list": true, "deny-list": true, "rate-limit-whitelist": true}

// checkValue checks raw for s and returns the value to use: raw itself,
// or for a pattern file reference the addresses of the file, so that the
// list is checked and rendered like one written in the annotation. A
// change of the file's ConfigMap rebuilds the configuration like any
// watched object.
func (b *builder) checkValue(s *Setting, raw string) (string, error) {
	name, ok := strings.CutPrefix(raw, "patterns/")
	if !ok || !patternSettings[s.Name] {
		return raw, s.check(raw)
	}
	cm := b.s.PatternFiles
	if cm == nil {
		return raw, fmt.Errorf("pattern file %q: no --configmap-patternfiles is set", name)
	}
	content, ok := cm.Data[name]
	if !ok {
		return raw, fmt.Errorf("pattern file %q is not a key of ConfigMap %s/%s", name, cm.Namespace, cm.Name)
	}
	var items []string
	for line := range strings.SplitSeq(content, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			items = append(items, line)
		}
	}
	value := strings.Join(items, " ")
	if err := s.check(value); err != nil {
		return raw, fmt.Errorf("pattern file %q of ConfigMap %s/%s: %w", name, cm.Namespace, cm.Name, err)
	}
	return value, nil
}
