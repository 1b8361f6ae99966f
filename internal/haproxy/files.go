package haproxy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"
)

// file is one file a state needs.
type file struct {
	data []byte
	mode os.FileMode
	// createOnly leaves an existing file as it is: a map file a check
	// needs to exist while the running HAProxy's version stays on disk.
	createOnly bool
}

const (
	configFile    = "haproxy.cfg"
	mapsDirName   = "maps"
	errorsDirName = "errorfiles"
)

// managedDirs are the directories under ConfigDir that hold only files
// stateFiles returns: the writer removes whatever else it finds there.
var managedDirs = []string{mapsDirName, certsDirName, errorsDirName}

// stateFiles returns every file st needs, by path relative to ConfigDir:
// haproxy.cfg (cfg; left out when empty, for a caller that knows it is
// unchanged), the map files, the crt-list and certificates (0600: they
// hold private keys) and the error pages. cache (nil: none) keeps map
// files from being rendered again while their map is unchanged.
func (r renderer) stateFiles(st *state, cfg string, cache *renderCache) map[string]file {
	out, _ := r.stateFilesLazy(st, cfg, cache, false)
	return out
}

// stateFilesLazy is stateFiles that, with lazyMaps, leaves each map file
// whose rendering the cache lacks as it is on disk (createOnly); stale
// says it left one.
func (r renderer) stateFilesLazy(st *state, cfg string, cache *renderCache, lazyMaps bool) (out map[string]file, stale bool) {
	out = map[string]file{}
	if cfg != "" {
		out[configFile] = configFileOf(cfg)
	}
	for _, name := range mapNames {
		rel := filepath.Join(mapsDirName, name+".map")
		if data, ok := cache.renderedMap(name, st.maps[name]); ok || !lazyMaps {
			if !ok {
				data = cache.mapFile(name, st.maps[name])
			}
			out[rel] = file{data: data, mode: 0o640}
			continue
		}
		out[rel] = file{mode: 0o640, createOnly: true}
		stale = true
	}
	for rel, data := range r.tlsFiles(st.tls) {
		out[rel] = file{data: data, mode: 0o600}
	}
	for _, p := range st.extras.errorPages {
		out[filepath.Join(errorsDirName, p.file)] = file{data: []byte(p.content), mode: 0o640}
	}
	if st.extras.mirror {
		out[mirrorLuaFile] = file{data: mirrorLua, mode: 0o640}
	}
	return out, stale
}

// mapFiles are st's map files, by path relative to ConfigDir.
func (r renderer) mapFiles(st *state, cache *renderCache) map[string]file {
	out := make(map[string]file, len(mapNames))
	for _, name := range mapNames {
		out[filepath.Join(mapsDirName, name+".map")] = file{data: cache.mapFile(name, st.maps[name]), mode: 0o640}
	}
	return out
}

// configFileOf is haproxy.cfg as a file. Its data is cfg's own memory,
// not a copy: at 10,000 backends the copy the writer keeps (diskFiles)
// would be megabytes more, and file data is never changed.
func configFileOf(cfg string) file {
	return file{data: unsafe.Slice(unsafe.StringData(cfg), len(cfg)), mode: 0o640}
}

// checkFiles are the files `haproxy -c` needs to check st: all of them,
// except that the map files only have to exist. The live HAProxy's maps
// stay on disk until the check passes.
func (r renderer) checkFiles(st *state) map[string]file {
	out := r.stateFiles(st, "", nil)
	for rel, f := range out {
		if strings.HasPrefix(rel, mapsDirName+string(filepath.Separator)) {
			out[rel] = file{mode: f.mode, createOnly: true}
		}
	}
	return out
}

// mapFile renders map name, reusing the last rendering while the map has
// the same entries (a state's maps never change once built).
func (c *renderCache) mapFile(name string, m map[string]string) []byte {
	if c == nil {
		return mapFile(m)
	}
	if e, ok := c.maps[name]; ok && mapsEqual(e.m, m) {
		if !sameMap(e.m, m) {
			// An equal map made afresh (a full Build) is the one to
			// compare with from now on: the next call is then a pointer
			// comparison, not one of 10,000 entries on every endpoint
			// change, and the old map can be freed.
			e.m = m
			c.maps[name] = e
		}
		return e.data
	}
	if c.maps == nil {
		c.maps = map[string]renderedMap{}
	}
	data := mapFile(m)
	c.maps[name] = renderedMap{m: m, data: data}
	return data
}

// renderedMap returns the last rendering of map name when it was of m
// itself: no entry is compared.
func (c *renderCache) renderedMap(name string, m map[string]string) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	e, ok := c.maps[name]
	if !ok || !sameMap(e.m, m) {
		return nil, false
	}
	return e.data, true
}

type renderedMap struct {
	m    map[string]string
	data []byte
}

// diskFiles is what the writer knows the config directory holds, so
// that an unchanged file is neither read nor written again.
type diskFiles map[string]diskFile

// diskFile is a file as last written. Of haproxy.cfg it keeps a digest,
// not the text: megabytes at 10,000 backends, rendered anew for each
// write and held by nothing else. The other files' bytes are the render
// cache's own, so keeping them costs nothing, and comparing them costs
// nothing while they are the same bytes.
type diskFile struct {
	mode   os.FileMode
	data   []byte
	digest bool
	sum    [sha256.Size]byte
}

func diskFileOf(rel string, f file) diskFile {
	if rel == configFile {
		return diskFile{mode: f.mode, digest: true, sum: sha256.Sum256(f.data)}
	}
	return diskFile{mode: f.mode, data: f.data}
}

// holds reports whether the file as written is f.
func (d diskFile) holds(f file) bool {
	if d.mode != f.mode {
		return false
	}
	if d.digest {
		return d.sum == sha256.Sum256(f.data)
	}
	return bytes.Equal(d.data, f.data)
}

// syncFiles is the one writer of the config directory: it writes each
// file of want that differs from what root holds and, with prune,
// removes the files of the managed directories that want lacks. disk is
// updated as files are written and removed; a path it does not know is
// compared with the file itself.
func syncFiles(root string, want map[string]file, disk diskFiles, prune bool) error {
	for _, rel := range slices.Sorted(maps.Keys(want)) {
		f := want[rel]
		p := filepath.Join(root, rel)
		old, known := disk[rel]
		if known && (f.createOnly || old.holds(f)) {
			continue
		}
		// A known file that differs is written without reading it first:
		// haproxy.cfg is megabytes at 10,000 backends.
		if !known {
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				if f.createOnly {
					continue
				}
				if st.Mode().Perm() == f.mode {
					if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, f.data) {
						disk[rel] = diskFileOf(rel, f)
						continue
					}
				}
			}
		}
		dirMode := os.FileMode(0o750)
		if f.mode&0o077 == 0 {
			dirMode = 0o700
		}
		if err := os.MkdirAll(filepath.Dir(p), dirMode); err != nil {
			return fmt.Errorf("create directory for %s: %w", rel, err)
		}
		if err := writeFileAtomic(p, f.data, f.mode); err != nil {
			return err
		}
		disk[rel] = diskFileOf(rel, f)
	}
	if !prune {
		return nil
	}
	for _, dir := range managedDirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, e fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil || e.IsDir() {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			if _, ok := want[rel]; ok {
				return nil
			}
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove %s: %w", rel, err)
			}
			delete(disk, rel)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// writeFileAtomic writes data next to path and renames it into place, so a
// starting or reloading HAProxy reads either the old or the new file. No
// fsync: after a host crash the daemon renders every file again at start.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Chmod(perm); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// writeTemp writes data to a fresh file next to path for `haproxy -c`;
// the caller removes it.
func writeTemp(path string, data []byte) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".check-*")
	if err != nil {
		return "", fmt.Errorf("write candidate config: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", fmt.Errorf("write candidate config: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("write candidate config: %w", err)
	}
	return f.Name(), nil
}
