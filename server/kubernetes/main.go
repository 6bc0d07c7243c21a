// ferry-k8s-agent: Ferry's node agent on Kubernetes, beside ferry_server in its
// DaemonSet's pod (packaging/kubernetes/ferry-server.yaml). It watches the API for Spark's
// pods and hands ferry_server each application's start, spark.authenticate secret and end
// through the dir ferry_server reads with --spark-apps-dir (docs/spark.md, "Kubernetes").
//
// Go, with client-go: its informers list and watch, relist after a watch expires (410
// Gone), reconnect after the API server restarts and keep what they knew meanwhile, which
// is what a node agent must get right and the C++ side has no library for. ferry_server
// itself needs no API access: only this container gets the service account's token.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// Spark's labels on its pods and ConfigMaps (Spark's Kubernetes Constants).
const (
	appLabel  = "spark-app-selector"
	roleLabel = "spark-role"
	// The variable Spark's Kubernetes backend gives executors the application's secret in
	// (SecurityManager.ENV_AUTH_SECRET).
	secretEnv = "_SPARK_AUTH_SECRET"
)

func main() {
	appsDir := flag.String("apps-dir", "", "the dir ferry_server reads with --spark-apps-dir (required)")
	node := flag.String("node-name", os.Getenv("NODE_NAME"), "this node's name (default: $NODE_NAME)")
	kubeconfig := flag.String("kubeconfig", "", "a kubeconfig; empty: the pod's service account")
	orphanAfter := flag.Duration("orphan-after", 24*time.Hour,
		"an application whose executors' ConfigMap stays but of which no pod lived this long "+
			"(its driver went without ending it) is ended")
	retention := flag.Duration("stopped-retention", time.Hour,
		"how long an end marker stays for ferry_server to read")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, *appsDir, *node, *kubeconfig, *orphanAfter, *retention); err != nil {
		log.Error("ferry-k8s-agent stopped", "error", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, appsDir, node, kubeconfig string, orphanAfter, retention time.Duration) error {
	if appsDir == "" || node == "" {
		return fmt.Errorf("--apps-dir and --node-name (or $NODE_NAME) are required")
	}
	if orphanAfter <= 0 || retention <= 0 {
		return fmt.Errorf("--orphan-after and --stopped-retention must be positive")
	}
	handOff, err := OpenHandOff(appsDir)
	if err != nil {
		return err
	}
	config, err := clientConfig(kubeconfig)
	if err != nil {
		return err
	}
	config.UserAgent = "ferry-k8s-agent"
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	metaClient, err := metadata.NewForConfig(config)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	poke := make(chan struct{}, 1)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { nudge(poke) },
		UpdateFunc: func(any, any) { nudge(poke) },
		DeleteFunc: func(any) { nudge(poke) },
	}
	// This node's executors, every driver (one per application at most), and the
	// executors' ConfigMaps by their metadata alone.
	executors := podInformer(client, metav1.ListOptions{
		LabelSelector: roleLabel + "=executor," + appLabel,
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	drivers := podInformer(client, metav1.ListOptions{LabelSelector: roleLabel + "=driver," + appLabel})
	configMaps := metadatainformer.NewFilteredMetadataInformer(metaClient,
		corev1.SchemeGroupVersion.WithResource("configmaps"), metav1.NamespaceAll, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = roleLabel + "=executor," + appLabel }).Informer()
	if err := configMaps.SetTransform(trimMetadata); err != nil {
		return err
	}
	for _, informer := range []cache.SharedIndexInformer{executors, drivers, configMaps} {
		if _, err := informer.AddEventHandler(notify); err != nil {
			return err
		}
		go informer.Run(ctx.Done())
	}
	// Nothing is decided from a partial view: an application missing from it would look
	// ended.
	log.Info("waiting for the API's first lists", "node", node)
	if !cache.WaitForCacheSync(ctx.Done(), executors.HasSynced, drivers.HasSynced, configMaps.HasSynced) {
		return nil // stopped first
	}
	log.Info("watching Spark's pods", "node", node, "apps-dir", appsDir)

	tracker := &Tracker{OrphanAfter: orphanAfter}
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		reconcile(log, handOff, tracker, executors, drivers, configMaps, retention)
		select {
		case <-ctx.Done():
			log.Info("stopping")
			return nil
		case <-poke:
		case <-tick.C:
		}
	}
}

func clientConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}

func nudge(poke chan struct{}) {
	select {
	case poke <- struct{}{}:
	default: // one is pending already
	}
}

func podInformer(client kubernetes.Interface, options metav1.ListOptions) cache.SharedIndexInformer {
	pods := client.CoreV1().Pods(metav1.NamespaceAll)
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector, o.FieldSelector = options.LabelSelector, options.FieldSelector
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector, o.FieldSelector = options.LabelSelector, options.FieldSelector
			return pods.Watch(ctx, o)
		},
	}, &corev1.Pod{}, 0, cache.Indexers{})
	// Only what Tracker reads is kept.
	_ = informer.SetTransform(trimPod)
	return informer
}

// trimPod keeps of a pod its name, labels, phase and the secret Spark gives executors.
func trimPod(object any) (any, error) {
	pod, ok := object.(*corev1.Pod)
	if !ok {
		return object, nil // a tombstone
	}
	trimmed := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion,
			Labels:          map[string]string{appLabel: pod.Labels[appLabel], roleLabel: pod.Labels[roleLabel]},
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}
	for _, container := range pod.Spec.Containers {
		for _, env := range container.Env {
			if env.Name == secretEnv {
				trimmed.Spec.Containers = []corev1.Container{{Name: container.Name, Env: []corev1.EnvVar{env}}}
			}
		}
	}
	return trimmed, nil
}

func trimMetadata(object any) (any, error) {
	meta, ok := object.(*metav1.PartialObjectMetadata)
	if !ok {
		return object, nil
	}
	return &metav1.PartialObjectMetadata{TypeMeta: meta.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: meta.Name, Namespace: meta.Namespace, UID: meta.UID,
		ResourceVersion: meta.ResourceVersion, Labels: map[string]string{appLabel: meta.Labels[appLabel]},
	}}, nil
}

// PodOf is what Tracker reads of a (trimmed) pod.
func PodOf(pod *corev1.Pod) Pod {
	p := Pod{
		Namespace: pod.Namespace,
		App:       pod.Labels[appLabel],
		Role:      pod.Labels[roleLabel],
		Live:      pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed,
	}
	for _, container := range pod.Spec.Containers {
		for _, env := range container.Env {
			if env.Name != secretEnv {
				continue
			}
			if env.ValueFrom != nil {
				p.SecretByReference = true
			} else {
				value := env.Value
				p.Secret = &value
			}
		}
	}
	return p
}

func reconcile(log *slog.Logger, handOff *HandOff, tracker *Tracker, executors, drivers, configMaps cache.SharedIndexInformer, retention time.Duration) {
	started, err := handOff.Started()
	if err != nil {
		log.Error("reading the started applications", "error", err)
		return
	}
	stopped, err := handOff.Stopped()
	if err != nil {
		log.Error("reading the end markers", "error", err)
		return
	}
	view := View{ConfigMaps: map[string]bool{}}
	for _, informer := range []cache.SharedIndexInformer{executors, drivers} {
		for _, object := range informer.GetStore().List() {
			if pod, ok := object.(*corev1.Pod); ok {
				view.Pods = append(view.Pods, PodOf(pod))
			}
		}
	}
	for _, object := range configMaps.GetStore().List() {
		if meta, ok := object.(*metav1.PartialObjectMetadata); ok {
			view.ConfigMaps[meta.Labels[appLabel]] = true
		}
	}
	now := time.Now()
	starts, ends, refused := tracker.Decide(now, view, started, stopped)
	for _, r := range refused {
		log.Warn("application not handed over", "app", r.App, "why", r.Why)
	}
	for _, start := range starts {
		if err := handOff.Start(start.App, start.Secret); err != nil {
			log.Error("handing over an application's start", "app", start.App, "error", err)
			continue
		}
		log.Info("application started on this node", "app", start.App, "spark.authenticate", start.Secret != nil)
		if start.SecretByReference {
			log.Warn("its executors' pods give the secret by reference, which the agent does not "+
				"read: ferry_server uses its other secrets for it", "app", start.App)
		}
	}
	for _, end := range ends {
		if err := handOff.End(end.App); err != nil {
			log.Error("handing over an application's end", "app", end.App, "error", err)
			continue
		}
		tracker.Ended(end.App)
		log.Info("application ended", "app", end.App, "why", end.Why)
	}
	if n, err := handOff.Expire(stopped, now.Add(-retention)); err != nil {
		log.Error("deleting old end markers", "error", err)
	} else if n > 0 {
		log.Info("deleted old end markers", "count", n)
	}
}
