package main

import (
	"fmt"
	"sort"
	"time"
)

// Pod is what the agent keeps of one of Spark's pods (a driver anywhere, or an executor
// on its node).
type Pod struct {
	Namespace string
	App       string // its spark-app-selector label
	Role      string // its spark-role label: "driver" or "executor"
	// Pending or Running: not terminated (Succeeded or Failed).
	Live bool
	// The application's spark.authenticate secret, as Spark's Kubernetes backend puts it
	// in an executor's pod (the _SPARK_AUTH_SECRET variable); nil when it gives none.
	Secret *string
	// The secret is given by a reference the agent does not read (valueFrom).
	SecretByReference bool
}

// View is what the API says now, from the agent's watches.
type View struct {
	Pods []Pod
	// Applications whose executors' ConfigMap exists: Spark's Kubernetes backend makes it
	// at an application's start and deletes it at its end (and Kubernetes with the driver's
	// pod, its owner, when the driver runs in one).
	ConfigMaps map[string]bool
}

// Start and End are what the hand-off is told.
type Start struct {
	App    string
	Secret *string
	// Its executors' pods give the secret by a reference the agent does not read
	// (valueFrom): ferry_server falls back to its other secrets.
	SecretByReference bool
}

type End struct {
	App string
	Why string
}

// Refused is an application not started: its executors' pods on the node disagree on its
// namespace or secret (a pod made to pass for one of another application's).
type Refused struct {
	App string
	Why string
}

// Tracker decides when a Spark application starts and ends on this node, from what the
// API says and what the hand-off dir already holds (docs/spark.md, "Kubernetes"):
//   - it starts when an executor of it is Pending or Running on this node, unless its
//     executors' pods here disagree on its namespace or secret;
//   - it ends when its driver's pod ended (Succeeded or Failed) or went; without a driver's
//     pod (a driver outside the cluster), when Spark deleted its executors' ConfigMap and no
//     executor of it lives on this node;
//   - it is taken as ended when its ConfigMap stays but no pod of it (a driver's pod or an
//     executor on this node) lived for OrphanAfter: its driver went without ending it.
//
// It keeps only when each started application was last seen alive, so the hand-off dir is
// its whole state: a restarted agent reads the starts written and ends whatever ended while
// it was down. Not thread-safe: one loop calls it.
type Tracker struct {
	OrphanAfter time.Duration
	lastLive    map[string]time.Time
	refused     map[string]bool // said once each, while its pods are here
}

// Decide says which applications start and which end now, and which are refused (each
// once). `started` and `stopped` are the hand-off dir's starts and end markers.
func (t *Tracker) Decide(now time.Time, view View, started map[string]bool, stopped map[string]time.Time) ([]Start, []End, []Refused) {
	if t.lastLive == nil {
		t.lastLive = map[string]time.Time{}
		t.refused = map[string]bool{}
	}
	type app struct {
		drivers, liveDrivers, liveExecutors int
		namespace                           string
		secret                              *string
		secretByReference                   bool
		conflict                            string
	}
	apps := map[string]*app{}
	of := func(id string) *app {
		a := apps[id]
		if a == nil {
			a = &app{}
			apps[id] = a
		}
		return a
	}
	for _, pod := range view.Pods {
		if !ValidAppID(pod.App) {
			continue
		}
		a := of(pod.App)
		switch pod.Role {
		case "driver":
			a.drivers++
			if pod.Live {
				a.liveDrivers++
			}
		case "executor":
			if !pod.Live {
				continue
			}
			a.liveExecutors++
			if a.liveExecutors == 1 {
				a.namespace, a.secret = pod.Namespace, pod.Secret
			} else if pod.Namespace != a.namespace {
				a.conflict = "its executors' pods on this node are in namespaces " + a.namespace +
					" and " + pod.Namespace
			} else if (pod.Secret == nil) != (a.secret == nil) || (pod.Secret != nil && *pod.Secret != *a.secret) {
				a.conflict = "its executors' pods on this node give different secrets"
			}
			a.secretByReference = a.secretByReference || pod.SecretByReference
		}
	}

	for id := range t.refused {
		if apps[id] == nil {
			delete(t.refused, id) // its pods are gone: said again if they come back
		}
	}
	var starts []Start
	var refused []Refused
	for id, a := range apps {
		if a.liveExecutors == 0 || started[id] {
			continue
		}
		if _, ended := stopped[id]; ended {
			continue // an executor's pod that outlived its application's end
		}
		if a.conflict != "" {
			if !t.refused[id] {
				t.refused[id] = true
				refused = append(refused, Refused{App: id, Why: a.conflict})
			}
			continue
		}
		delete(t.refused, id)
		starts = append(starts, Start{App: id, Secret: a.secret,
			SecretByReference: a.secret == nil && a.secretByReference})
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].App < starts[j].App })
	sort.Slice(refused, func(i, j int) bool { return refused[i].App < refused[j].App })

	var ends []End
	for id := range started {
		if _, ended := stopped[id]; ended {
			ends = append(ends, End{App: id, Why: "its end marker is there already"})
			continue
		}
		a := apps[id]
		if a == nil {
			a = &app{}
		}
		if a.liveDrivers > 0 || a.liveExecutors > 0 {
			t.lastLive[id] = now
		} else if _, seen := t.lastLive[id]; !seen {
			// Started before this agent did: the bound counts from now.
			t.lastLive[id] = now
		}
		var why string
		switch {
		case a.drivers > 0 && a.liveDrivers == 0:
			why = "its driver's pod ended"
		case a.drivers > 0 || a.liveExecutors > 0:
		case !view.ConfigMaps[id]:
			why = "Spark deleted its executors' ConfigMap"
		case now.Sub(t.lastLive[id]) >= t.OrphanAfter:
			why = fmt.Sprintf("no pod of it lived for %s: its driver went without ending it", t.OrphanAfter)
		}
		if why != "" {
			ends = append(ends, End{App: id, Why: why})
		}
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i].App < ends[j].App })
	return starts, ends, refused
}

// Ended forgets an application the hand-off has ended.
func (t *Tracker) Ended(app string) { delete(t.lastLive, app) }
