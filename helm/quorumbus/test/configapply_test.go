package charttest

import (
	"slices"
	"strings"
	"testing"
)

// With emulatorConfig, a post-install/post-upgrade hook Job runs the image's qbctl apply
// against the client Service with the Config.json ConfigMap mounted where its --file
// points; --prune only with configApply.prune; no Job without emulatorConfig or with
// configApply off. (The booted-StatefulSet test runs its container against the nodes.)
func TestConfigApplyJob(t *testing.T) {
	vals := readValues(t, "config-json")
	o := decode(t, render(t, vals))
	job := o.jobs[o.sts.Name+"-apply-config"]
	if job == nil {
		t.Fatalf("no apply Job among %v", sortedKeys(o.jobs))
	}
	if job.Annotations["helm.sh/hook"] != "post-install,post-upgrade" || !strings.Contains(job.Annotations["helm.sh/hook-delete-policy"], "before-hook-creation") {
		t.Errorf("Job annotations %v", job.Annotations)
	}
	spec := job.Spec.Template.Spec
	checkRestricted(t, "apply Job", spec)
	if len(spec.Containers) != 1 || spec.RestartPolicy != "Never" || job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit < 1 {
		t.Fatalf("Job spec: %+v", job.Spec)
	}
	c := spec.Containers[0]
	if !slices.Equal(c.Command, []string{"/usr/local/bin/qbctl"}) || !slices.Contains(c.Args, "apply") || slices.Contains(c.Args, "--prune") ||
		!slices.Contains(c.Args, "--admin-addr=quorumbus.messaging.svc.cluster.local:5300") {
		t.Errorf("container: %v %v", c.Command, c.Args)
	}
	var file string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--file="); ok {
			file = v
		}
	}
	var mounted bool
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && o.configMaps[v.ConfigMap.Name] != nil &&
				file == m.MountPath+"/Config.json" && o.configMaps[v.ConfigMap.Name].Data["Config.json"] != "" {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("--file=%s is not the Config.json of a rendered ConfigMap mounted in the Job", file)
	}
	env, _ := containerEnv(t, c, podOf(o, 9, "10.1.0.99", ""))
	var cs bool
	for _, e := range env {
		cs = cs || strings.HasPrefix(e, "QUORUMBUS_CONNECTION_STRING=Endpoint=sb://quorumbus.messaging.svc.cluster.local:5672;")
	}
	if !cs {
		t.Errorf("the Job's qbctl has no connection string with the key: %q", env)
	}

	vals["configApply"] = map[string]any{"prune": true}
	if j := decode(t, render(t, vals)).jobs[o.sts.Name+"-apply-config"]; j == nil || !slices.Contains(j.Spec.Template.Spec.Containers[0].Args, "--prune") {
		t.Errorf("configApply.prune: %+v", j)
	}
	vals["configApply"] = map[string]any{"enabled": false}
	if n := len(decode(t, render(t, vals)).jobs); n != 0 {
		t.Errorf("configApply.enabled false: %d Jobs", n)
	}
	if n := len(decode(t, render(t, readValues(t, "three"))).jobs); n != 0 {
		t.Errorf("no emulatorConfig: %d Jobs", n)
	}
}
