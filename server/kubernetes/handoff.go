package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// The largest service data ferry_server reads (HandedOffApps::kMaxServiceDataBytes).
const maxServiceDataBytes = 64 * 1024

// An application id ferry_server takes (server/storage/ids.h): a file name here too.
var appIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$`)

// ValidAppID says whether ferry_server would take `app` as an application id.
func ValidAppID(app string) bool { return appIDPattern.MatchString(app) }

// HandOff is the dir ferry_server reads with --spark-apps-dir, in the layout of
// server/spark/apps/handed_off_apps.h: apps/<id> (the service data: {"secret": ...} or
// nothing) at an application's start, stopped/<id> (empty) at its end. The agent alone
// writes and deletes here; ferry_server only reads, so the two may run as different users
// (ferry_server in the group that owns the dir).
//
// Modes are set explicitly (dirs 0750, files 0640), whatever the umask. Each file is
// written to a temporary name ('.' first, which ferry_server skips), synced, renamed, and
// the dir synced: ferry_server sees a file whole or not at all, and an end written is
// kept across a crash of the node.
type HandOff struct {
	root, apps, stopped string
}

// OpenHandOff makes the dir and its two subdirs if they are missing and checks that no
// one but their owner can write them (ferry_server refuses them otherwise).
func OpenHandOff(root string) (*HandOff, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("the hand-off dir %q is not an absolute path", root)
	}
	h := &HandOff{root: root, apps: filepath.Join(root, "apps"), stopped: filepath.Join(root, "stopped")}
	for _, dir := range []string{h.root, h.apps, h.stopped} {
		if err := os.Mkdir(dir, 0o750); err == nil {
			// Whatever the umask: ferry_server may read it as a member of its group.
			if err := os.Chmod(dir, 0o750); err != nil {
				return nil, err
			}
		} else if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		info, err := os.Lstat(dir)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			return nil, fmt.Errorf("%s is not a directory", dir)
		}
		if info.Mode().Perm()&0o022 != 0 {
			if err := os.Chmod(dir, 0o750); err != nil {
				return nil, fmt.Errorf("%s is writable by others than its owner: %w", dir, err)
			}
		}
	}
	return h, nil
}

// Started lists the applications whose start is written (apps/<id>).
func (h *HandOff) Started() (map[string]bool, error) {
	names, err := h.list(h.apps)
	if err != nil {
		return nil, err
	}
	started := make(map[string]bool, len(names))
	for name := range names {
		started[name] = true
	}
	return started, nil
}

// Stopped lists the end markers (stopped/<id>) by when each was written.
func (h *HandOff) Stopped() (map[string]time.Time, error) { return h.list(h.stopped) }

func (h *HandOff) list(dir string) (map[string]time.Time, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make(map[string]time.Time, len(entries))
	for _, entry := range entries {
		if !entry.Type().IsRegular() || !ValidAppID(entry.Name()) {
			continue
		}
		info, err := entry.Info()
		if err != nil {
			continue // gone since the listing
		}
		names[entry.Name()] = info.ModTime()
	}
	return names, nil
}

// Start writes the application's start, with its spark.authenticate secret (nil:
// the application runs without it).
func (h *HandOff) Start(app string, secret *string) error {
	if !ValidAppID(app) {
		return fmt.Errorf("application id %.130q is not one ferry_server takes", app)
	}
	var data []byte
	if secret != nil {
		var err error
		if data, err = json.Marshal(map[string]string{"secret": *secret}); err != nil {
			return err
		}
		if len(data) > maxServiceDataBytes {
			return fmt.Errorf("application %s: its secret is %d bytes (ferry_server reads at most %d)",
				app, len(*secret), maxServiceDataBytes)
		}
	}
	return writeFile(h.apps, app, data)
}

// End writes the application's end marker, then deletes its start: ferry_server forgets
// it and deletes its executors' dirs. The marker first, so that a failed delete still
// hands the end over.
func (h *HandOff) End(app string) error {
	if !ValidAppID(app) {
		return fmt.Errorf("application id %.130q is not one ferry_server takes", app)
	}
	if err := writeFile(h.stopped, app, nil); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(h.apps, app)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(h.apps)
}

// Expire deletes, of the end markers `stopped` lists (Stopped()), those written before
// `cutoff`: by then ferry_server (which looks every few seconds) has handled them. It
// returns how many went.
func (h *HandOff) Expire(stopped map[string]time.Time, cutoff time.Time) (int, error) {
	deleted := 0
	for app, written := range stopped {
		if written.After(cutoff) {
			continue
		}
		if err := os.Remove(filepath.Join(h.stopped, app)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return deleted, err
		}
		deleted++
	}
	if deleted > 0 {
		return deleted, syncDir(h.stopped)
	}
	return 0, nil
}

func writeFile(dir, name string, data []byte) error {
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o640); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
