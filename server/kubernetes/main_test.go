package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An executor's pod as Spark's Kubernetes backend makes it, trimmed to what the agent keeps.
func TestAnExecutorsPodGivesItsApplicationAndSecret(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "job-exec-1", Namespace: "default", Labels: map[string]string{
			appLabel: app, roleLabel: "executor", "spark-exec-id": "1"},
			Annotations: map[string]string{"a": "kept nowhere"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "spark-kubernetes-executor",
			Env: []corev1.EnvVar{{Name: "SPARK_EXECUTOR_ID", Value: "1"}, {Name: secretEnv, Value: "s3cr3t"},
				{Name: "SPARK_JAVA_OPT_0", Value: "-Xmx1g"}},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	object, err := trimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	trimmed := object.(*corev1.Pod)
	if len(trimmed.Annotations) != 0 || len(trimmed.Spec.Containers) != 1 ||
		len(trimmed.Spec.Containers[0].Env) != 1 || len(trimmed.Labels) != 2 {
		t.Fatalf("kept more than the agent reads: %+v", trimmed)
	}
	got := PodOf(trimmed)
	if got.App != app || got.Role != "executor" || !got.Live || got.Secret == nil || *got.Secret != "s3cr3t" {
		t.Fatalf("PodOf = %+v", got)
	}
	pod.Status.Phase = corev1.PodFailed
	pod.Spec.Containers[0].Env[1] = corev1.EnvVar{Name: secretEnv, ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}
	object, _ = trimPod(pod)
	got = PodOf(object.(*corev1.Pod))
	if got.Live || got.Secret != nil || !got.SecretByReference {
		t.Fatalf("PodOf = %+v, want an ended pod whose secret is by reference", got)
	}
}
