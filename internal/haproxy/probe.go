package haproxy

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var versionRE = regexp.MustCompile(`(?m)^HA-?Proxy version (\d+)\.(\d+)(?:\.(\d+))?(\S*)`)

// probe runs `haproxy -vv` so the renderer emits only what this build knows.
func probe(program string) (Version, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, program, "-vv").CombinedOutput()
	if err != nil {
		return Version{}, fmt.Errorf("probe %s -vv: %w", program, err)
	}
	return parseVersion(string(out))
}

func parseVersion(out string) (Version, error) {
	m := versionRE.FindStringSubmatch(out)
	if m == nil {
		return Version{}, fmt.Errorf("no version in haproxy -vv output: %.80q", out)
	}
	v := Version{Features: map[string]bool{}}
	v.Major, _ = strconv.Atoi(m[1])
	v.Minor, _ = strconv.Atoi(m[2])
	if m[3] != "" {
		v.Patch, _ = strconv.Atoi(m[3])
		v.Raw = fmt.Sprintf("%s.%s.%s%s", m[1], m[2], m[3], m[4])
	} else {
		v.Raw = fmt.Sprintf("%s.%s%s", m[1], m[2], m[4])
	}
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "Feature list :")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			if name, on := strings.CutPrefix(f, "+"); on {
				v.Features[name] = true
			}
		}
	}
	// Builds older than the feature list still announce the exporter.
	if strings.Contains(out, "Prometheus exporter") {
		v.Features["PROMEX"] = true
	}
	return v, nil
}
