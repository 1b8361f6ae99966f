package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// licenseFile names the files a module's terms are in: the license, and the
// notices Apache-2.0 (section 4d) requires to travel with a binary.
var licenseFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying|notice|patents)([.-].*)?$`)

// copyLicenses copies the license files of the Go toolchain and of every
// module linked into bin to dir/<module path>/, as the binary was built
// (replacements followed). A module without one is an error: its terms
// would be missing from the package.
func copyLicenses(bin, dir string) error {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return err
	}
	modcache, err := goEnv("GOMODCACHE")
	if err != nil {
		return err
	}
	goroot, err := goEnv("GOROOT")
	if err != nil {
		return err
	}
	seen := map[[32]byte]string{}
	if err := copyMatching(goroot, filepath.Join(dir, "go"), seen); err != nil {
		return fmt.Errorf("the Go toolchain (%s): %w", goroot, err)
	}
	var errs []error
	for _, m := range info.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		src := m.Path
		if m.Version != "" {
			src = filepath.Join(modcache, escape(m.Path)+"@"+m.Version)
		}
		if err := copyMatching(src, filepath.Join(dir, m.Path), seen); err != nil {
			errs = append(errs, fmt.Errorf("module %s %s: %w", m.Path, m.Version, err))
		}
	}
	return errors.Join(errs...)
}

// copyMatching copies src's license files into dst. A text already copied
// (many modules carry the same Apache-2.0 or BSD text) becomes a relative
// symbolic link to the first copy: the package does not ship it twice.
func copyMatching(src, dst string, seen map[[32]byte]string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	n := 0
	for _, e := range entries {
		if !e.Type().IsRegular() || !licenseFile.MatchString(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		path := filepath.Join(dst, e.Name())
		sum := sha256.Sum256(b)
		if first, ok := seen[sum]; ok {
			rel, err := filepath.Rel(dst, first)
			if err != nil {
				return err
			}
			if err := os.Symlink(rel, path); err != nil {
				return err
			}
		} else {
			seen[sum] = path
			if err := os.WriteFile(path, b, 0o644); err != nil {
				return err
			}
		}
		n++
	}
	if n == 0 {
		return errors.New("no license file")
	}
	return nil
}

// escape is the module cache's spelling of a path: an upper-case letter
// becomes "!" and the lower-case one.
func escape(path string) string {
	var b strings.Builder
	for _, r := range path {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}
