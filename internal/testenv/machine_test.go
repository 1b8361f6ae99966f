package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAptMirror(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"none", nil, "http://deb.debian.org/debian"},
		{"one-line", map[string]string{
			"sources.list": "# deb http://old.example/debian bookworm main\n" +
				"deb [signed-by=/k.gpg arch=amd64] http://mirror.example/debian bookworm main\n" +
				"deb http://mirror.example/debian-security bookworm-security main\n",
		}, "http://mirror.example/debian"},
		{"deb822", map[string]string{
			"sources.list.d/debian.sources": "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\nComponents: main\n\n" +
				"Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n" +
				"Enabled: no\nTypes: deb\nURIs: http://off.example/debian\nSuites: bookworm\n\n" +
				"Types: deb\n# a comment: with a colon\nURIs: http://deb822.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n",
		}, "http://deb822.example/debian"},
		{"other suites only", map[string]string{
			"sources.list.d/x.list": "deb http://mirror.example/debian trixie main\n",
		}, "http://deb.debian.org/debian"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tc.files {
				path := filepath.Join(root, "etc/apt", name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := aptMirror(root); got != tc.want {
				t.Errorf("aptMirror = %q, want %q", got, tc.want)
			}
		})
	}
}
