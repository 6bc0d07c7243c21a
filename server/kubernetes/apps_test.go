package main

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

const app = "spark-0123456789abcdef0123456789abcdef"

func secret(s string) *string { return &s }

func executor(app string, live bool, s *string) Pod {
	return Pod{App: app, Role: "executor", Live: live, Secret: s}
}

func driver(app string, live bool) Pod { return Pod{App: app, Role: "driver", Live: live} }

func apps(ids ...string) map[string]bool {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

var none = map[string]time.Time{}

// decide is Decide for the tests that refuse nothing.
func decide(tracker *Tracker, now time.Time, view View, started map[string]bool, stopped map[string]time.Time) ([]Start, []End) {
	starts, ends, _ := tracker.Decide(now, view, started, stopped)
	return starts, ends
}

func TestAnExecutorOnTheNodeStartsItsApplicationWithItsSecret(t *testing.T) {
	tracker := &Tracker{OrphanAfter: time.Hour}
	now := time.Unix(1_800_000_000, 0)
	view := View{Pods: []Pod{executor(app, true, secret("s3cr3t")), executor("spark-other", false, nil)}}
	starts, ends := decide(tracker, now, view, apps(), none)
	if len(starts) != 1 || starts[0].App != app || starts[0].Secret == nil || *starts[0].Secret != "s3cr3t" {
		t.Fatalf("starts = %+v, want %s with its secret (and none for an ended executor)", starts, app)
	}
	if len(ends) != 0 {
		t.Fatalf("ends = %+v", ends)
	}
	// Without spark.authenticate: a start without a secret. Once written, not again.
	starts, _ = decide(tracker, now, View{Pods: []Pod{executor("spark-open", true, nil)}}, apps(), none)
	if len(starts) != 1 || starts[0].Secret != nil {
		t.Fatalf("starts = %+v, want one without a secret", starts)
	}
	starts, _ = decide(tracker, now, View{Pods: []Pod{executor("spark-open", true, nil)}}, apps("spark-open"),
		none)
	if len(starts) != 0 {
		t.Fatalf("started again: %+v", starts)
	}
	// An executor's pod that outlives its application's end starts nothing.
	starts, _ = decide(tracker, now, View{Pods: []Pod{executor(app, true, nil)}}, apps(),
		map[string]time.Time{app: now})
	if len(starts) != 0 {
		t.Fatalf("an ended application started again: %+v", starts)
	}
	// An id ferry_server would refuse is not handed over.
	starts, _ = decide(tracker, now, View{Pods: []Pod{executor("../etc", true, nil)}}, apps(), none)
	if len(starts) != 0 {
		t.Fatalf("starts = %+v", starts)
	}
}

func TestAClientModeApplicationEndsWithItsConfigMapNotWithItsLastExecutor(t *testing.T) {
	tracker := &Tracker{OrphanAfter: time.Hour}
	now := time.Unix(1_800_000_000, 0)
	// Dynamic allocation released every executor: its ConfigMap says it runs on.
	_, ends := decide(tracker, now, View{ConfigMaps: apps(app)}, apps(app), none)
	if len(ends) != 0 {
		t.Fatalf("ended while its ConfigMap is there: %+v", ends)
	}
	// Spark's stop deleted it (and its executors' pods).
	_, ends = decide(tracker, now.Add(time.Minute), View{}, apps(app), none)
	if len(ends) != 1 || ends[0].App != app || !strings.Contains(ends[0].Why, "ConfigMap") {
		t.Fatalf("ends = %+v, want %s for its ConfigMap", ends, app)
	}
	// An executor still alive here keeps it (spark.kubernetes.executor.disableConfigMap).
	_, ends = decide(tracker, now, View{Pods: []Pod{executor(app, true, nil)}}, apps(app), none)
	if len(ends) != 0 {
		t.Fatalf("ended with a live executor: %+v", ends)
	}
}

func TestAClusterModeApplicationEndsWithItsDriversPod(t *testing.T) {
	tracker := &Tracker{OrphanAfter: time.Hour}
	now := time.Unix(1_800_000_000, 0)
	view := View{Pods: []Pod{driver(app, true)}}
	if _, ends := decide(tracker, now, view, apps(app), none); len(ends) != 0 {
		t.Fatalf("ended with its driver running: %+v", ends)
	}
	// The driver's pod Succeeded: its ConfigMap (owned by the pod) stays until the pod goes,
	// and executors may still be stopping.
	view = View{Pods: []Pod{driver(app, false), executor(app, true, nil)}, ConfigMaps: apps(app)}
	_, ends := decide(tracker, now, view, apps(app), none)
	if len(ends) != 1 || !strings.Contains(ends[0].Why, "driver") {
		t.Fatalf("ends = %+v, want one for its driver's pod", ends)
	}
}

func TestAnApplicationWhoseDriverVanishedEndsAfterTheBound(t *testing.T) {
	tracker := &Tracker{OrphanAfter: time.Hour}
	now := time.Unix(1_800_000_000, 0)
	live := View{Pods: []Pod{executor(app, true, nil)}, ConfigMaps: apps(app)}
	gone := View{ConfigMaps: apps(app)}
	decide(tracker, now, live, apps(app), none)
	if _, ends := decide(tracker, now.Add(59*time.Minute), gone, apps(app), none); len(ends) != 0 {
		t.Fatalf("ended within the bound: %+v", ends)
	}
	_, ends := decide(tracker, now.Add(time.Hour), gone, apps(app), none)
	if len(ends) != 1 || !strings.Contains(ends[0].Why, "no pod of it lived for 1h0m0s") {
		t.Fatalf("ends = %+v, want one past the bound", ends)
	}
	// A restarted agent counts the bound from its own start.
	restarted := &Tracker{OrphanAfter: time.Hour}
	if _, ends := decide(restarted, now.Add(2*time.Hour), gone, apps(app), none); len(ends) != 0 {
		t.Fatalf("a restarted agent ended it at once: %+v", ends)
	}
	if _, ends := decide(restarted, now.Add(3*time.Hour), gone, apps(app), none); len(ends) != 1 {
		t.Fatalf("ends = %+v, want one an hour after the restart", ends)
	}
}

func TestAnEndWrittenHalfIsWrittenAgain(t *testing.T) {
	tracker := &Tracker{OrphanAfter: time.Hour}
	now := time.Unix(1_800_000_000, 0)
	// Its marker is there but its start was not deleted (the agent stopped between them).
	_, ends := decide(tracker, now, View{ConfigMaps: apps(app)}, apps(app), map[string]time.Time{app: now})
	if !reflect.DeepEqual(ends, []End{{App: app, Why: "its end marker is there already"}}) {
		t.Fatalf("ends = %+v", ends)
	}
}

func TestExecutorsThatDisagreeStartNothing(t *testing.T) {
	tracker := &Tracker{OrphanAfter: time.Hour}
	now := time.Unix(1_800_000_000, 0)
	other := executor(app, true, secret("mine"))
	other.Namespace = "tenant-b"
	view := View{Pods: []Pod{executor(app, true, secret("s3cr3t")), other}}
	starts, _, refused := tracker.Decide(now, view, apps(), none)
	if len(starts) != 0 || len(refused) != 1 || !strings.Contains(refused[0].Why, "namespaces") {
		t.Fatalf("starts = %+v, refused = %+v; want it refused for its namespaces", starts, refused)
	}
	// Said once.
	if _, _, refused := tracker.Decide(now, view, apps(), none); len(refused) != 0 {
		t.Fatalf("refused again: %+v", refused)
	}
	view = View{Pods: []Pod{executor(app, true, secret("s3cr3t")), executor(app, true, secret("mine"))}}
	if _, _, refused := (&Tracker{}).Decide(now, view, apps(), none); len(refused) != 1 ||
		!strings.Contains(refused[0].Why, "secrets") {
		t.Fatalf("refused = %+v, want it refused for its secrets", refused)
	}
	// Agreeing pods: started.
	view = View{Pods: []Pod{executor(app, true, secret("s3cr3t")), executor(app, true, secret("s3cr3t"))}}
	if starts, _, _ := tracker.Decide(now, view, apps(), none); len(starts) != 1 {
		t.Fatalf("starts = %+v", starts)
	}
}
