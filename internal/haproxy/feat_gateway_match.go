package haproxy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// HTTPRoute match conditions (model/gateway_match.go) become the condition
// of the match's conditional backend. Names are checked again here as bare
// words; values are single-quoted (nothing is interpreted inside single
// quotes), after "--" so that a value starting with '-' is not read as a
// flag.

// maxConditionLen keeps a use_backend line well below what HAProxy reads.
const maxConditionLen = 1800

var matchMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}

// matchCondition renders m as anonymous ACLs, all of which must hold.
func matchCondition(m *model.RequestMatch) (string, error) {
	var parts []string
	value := func(fetch string, v model.ValueMatch) error {
		if !lineSafe(v.Value) || v.Value == "" || v.Value == "{" || v.Value == "}" {
			return fmt.Errorf("value %q of %s cannot be quoted", v.Value, fetch)
		}
		method := "str"
		if v.Regex {
			method = "reg"
		}
		parts = append(parts, fmt.Sprintf("{ %s -m %s -- %s }", fetch, method, quoteArg(v.Value)))
		return nil
	}
	if m.Method != "" {
		if !slices.Contains(matchMethods, m.Method) {
			return "", fmt.Errorf("method %q", m.Method)
		}
		parts = append(parts, "{ method "+m.Method+" }")
	}
	if m.PathRegex != "" {
		if err := value("path", model.ValueMatch{Value: m.PathRegex, Regex: true}); err != nil {
			return "", err
		}
	}
	if m.RandomBelow != 0 {
		if m.RandomBelow < 0 || m.RandomBelow > 100 {
			return "", fmt.Errorf("share %d", m.RandomBelow)
		}
		parts = append(parts, fmt.Sprintf("{ rand(100) -m int lt %d }", m.RandomBelow))
	}
	for _, h := range m.Headers {
		if !model.ValidHeaderName(h.Name) {
			return "", fmt.Errorf("header name %q", h.Name)
		}
		if err := value("req.fhdr("+h.Name+")", h); err != nil {
			return "", err
		}
	}
	for _, q := range m.Query {
		if !model.ValidQueryParamName(q.Name) {
			return "", fmt.Errorf("query parameter name %q", q.Name)
		}
		if err := value("urlp("+q.Name+")", q); err != nil {
			return "", err
		}
	}
	if len(parts) == 0 {
		return "", errors.New("no condition")
	}
	c := strings.Join(parts, " ")
	if len(c) > maxConditionLen {
		return "", fmt.Errorf("condition longer than %d characters", maxConditionLen)
	}
	return c, nil
}
