package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTheHandOffDirIsWrittenAsFerryServerReadsIt(t *testing.T) {
	root := filepath.Join(t.TempDir(), "apps-dir")
	h, err := OpenHandOff(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{root, filepath.Join(root, "apps"), filepath.Join(root, "stopped")} {
		info, err := os.Stat(dir)
		if err != nil || info.Mode().Perm() != 0o750 {
			t.Fatalf("%s: %v %v, want a dir of mode 0750", dir, info.Mode(), err)
		}
	}
	if err := h.Start(app, secret(`a "quoted" secret`)); err != nil {
		t.Fatal(err)
	}
	if err := h.Start("spark-open", nil); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "apps", app))
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]string
	if err := json.Unmarshal(data, &payload); err != nil || payload["secret"] != `a "quoted" secret` {
		t.Fatalf("apps/%s = %q (%v), want the secret in a JSON object", app, data, err)
	}
	if info, _ := os.Stat(filepath.Join(root, "apps", app)); info.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want 0640", info.Mode())
	}
	if data, _ := os.ReadFile(filepath.Join(root, "apps", "spark-open")); len(data) != 0 {
		t.Fatalf("an application without spark.authenticate: %q, want nothing", data)
	}
	started, err := h.Started()
	if err != nil || len(started) != 2 || !started[app] {
		t.Fatalf("Started() = %v, %v", started, err)
	}
	// No temporary file is left; ferry_server would skip one ('.' first) anyway.
	entries, _ := os.ReadDir(filepath.Join(root, "apps"))
	for _, entry := range entries {
		if strings.HasPrefix(entry.Name(), ".") {
			t.Fatalf("left: %s", entry.Name())
		}
	}

	if err := h.End(app); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "apps", app)); !os.IsNotExist(err) {
		t.Fatalf("apps/%s is left after its end", app)
	}
	stopped, err := h.Stopped()
	if err != nil || len(stopped) != 1 {
		t.Fatalf("Stopped() = %v, %v", stopped, err)
	}
	// Markers older than the retention go; newer ones stay.
	if n, err := h.Expire(stopped, time.Now().Add(-time.Hour)); n != 0 || err != nil {
		t.Fatalf("Expire = %d, %v; a new marker went", n, err)
	}
	if n, err := h.Expire(stopped, time.Now().Add(time.Second)); n != 1 || err != nil {
		t.Fatalf("Expire = %d, %v, want the marker gone", n, err)
	}
}

func TestTheHandOffRefusesWhatFerryServerWould(t *testing.T) {
	if _, err := OpenHandOff("relative"); err == nil {
		t.Fatal("a relative dir was taken")
	}
	root := t.TempDir()
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	h, err := OpenHandOff(root)
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := os.Stat(root); info.Mode().Perm()&0o022 != 0 {
		t.Fatalf("left writable by others: %v (ferry_server refuses it)", info.Mode())
	}
	for _, bad := range []string{"", ".hidden", "../x", "a/b", strings.Repeat("a", 129)} {
		if h.Start(bad, nil) == nil || h.End(bad) == nil {
			t.Errorf("application id %q was written", bad)
		}
	}
	if h.Start(app, secret(strings.Repeat("x", maxServiceDataBytes))) == nil {
		t.Error("service data past what ferry_server reads was written")
	}
	// Files that are not applications' are not listed.
	os.WriteFile(filepath.Join(root, "apps", ".spark-x.123"), nil, 0o640)
	os.Mkdir(filepath.Join(root, "apps", "spark-dir"), 0o750)
	if started, _ := h.Started(); len(started) != 0 {
		t.Fatalf("Started() = %v", started)
	}
}
