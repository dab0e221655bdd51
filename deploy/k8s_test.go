package deploy

import (
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestKubernetesDeliversEdits: what the manifests promise reaches the pods.
// The fleet ConfigMap is mounted as a directory, never with subPath (a
// subPath mount is a copy the kubelet never updates, so an edited
// ConfigMap never reaches a running pod and a SIGHUP re-reads the stale
// file), and --config names a file in it. A Secret key the example calls
// optional is referenced only as optional (a pod otherwise waits at
// volume mount, or at env, for a key it was told it need not have). A
// Deployment an HPA scales sets no replicas (each `kubectl apply -k` would
// reset the HPA's count). Prometheus Operator users get a ServiceMonitor
// for each Service, on a port the Service has, at /metrics.
func TestKubernetesDeliversEdits(t *testing.T) {
	docs := k8sDocs(t)
	byKind := map[string]map[string]map[string]any{}
	for _, d := range docs {
		k, n := str(d["kind"]), str(get(d, "metadata", "name"))
		if byKind[k] == nil {
			byKind[k] = map[string]map[string]any{}
		}
		byKind[k][n] = d
	}
	optional := optionalSecretKeys(t)
	if !optional["audit-tokens"] {
		t.Errorf("secret.example.yaml's key list: optional keys %v, want audit-tokens among them", optional)
	}
	scaled := map[string]bool{}
	for _, hpa := range byKind["HorizontalPodAutoscaler"] {
		scaled[str(get(hpa, "spec", "scaleTargetRef", "name"))] = true
	}
	for name, dep := range byKind["Deployment"] {
		t.Run(name, func(t *testing.T) {
			if scaled[name] && get(dep, "spec", "replicas") != nil {
				t.Errorf("spec.replicas = %v beside an HPA: every kubectl apply -k resets the HPA's count", get(dep, "spec", "replicas"))
			}
			pod := get(dep, "spec", "template", "spec")
			configMaps, secretVols := map[string]bool{}, map[string]map[string]any{}
			for _, v := range k8sList(get(pod, "volumes")) {
				if cm := get(v, "configMap"); cm != nil {
					configMaps[str(get(v, "name"))] = true
				}
				if s := get(v, "secret"); s != nil {
					secretVols[str(get(v, "name"))] = s.(map[string]any)
				}
			}
			for _, v := range secretVols {
				for _, it := range k8sList(v["items"]) {
					if k := str(get(it, "key")); optional[k] && v["optional"] != true {
						t.Errorf("secret volume item %s: the example calls it optional, the volume is optional: %v", k, v["optional"])
					}
				}
			}
			for _, c := range k8sList(get(pod, "containers")) {
				for _, e := range k8sList(get(c, "env")) {
					ref := get(e, "valueFrom", "secretKeyRef")
					if k := str(get(ref, "key")); ref != nil && optional[k] && get(ref, "optional") != true {
						t.Errorf("env %s from optional Secret key %s without optional: true", str(get(e, "name")), k)
					}
				}
				var fleetDirs []string
				for _, m := range k8sList(get(c, "volumeMounts")) {
					if !configMaps[str(get(m, "name"))] {
						continue
					}
					if get(m, "subPath") != nil {
						t.Errorf("volumeMount %s of a ConfigMap uses subPath %v: edits never reach the pod", str(get(m, "name")), get(m, "subPath"))
						continue
					}
					fleetDirs = append(fleetDirs, str(get(m, "mountPath")))
				}
				config := ""
				for _, a := range k8sList(get(c, "args")) {
					if v, ok := strings.CutPrefix(str(a), "--config="); ok {
						config = v
					}
				}
				if config == "" || !slices.Contains(fleetDirs, path.Dir(config)) {
					t.Errorf("--config=%s is not a file directly in a ConfigMap directory mount %v", config, fleetDirs)
				}
			}
		})
	}
	for _, name := range []string{"leasehold-reserver", "leasehold-router"} {
		svc, sm := byKind["Service"][name], byKind["ServiceMonitor"][name]
		if svc == nil || sm == nil {
			t.Errorf("Service %s: ServiceMonitor present %v", name, sm != nil)
			continue
		}
		if !mapSubset(get(sm, "spec", "selector", "matchLabels").(map[string]any), get(svc, "metadata", "labels").(map[string]any)) {
			t.Errorf("ServiceMonitor %s does not select Service %s's labels", name, name)
		}
		ports := map[string]bool{}
		for _, p := range k8sList(get(svc, "spec", "ports")) {
			ports[str(get(p, "name"))] = true
		}
		eps := k8sList(get(sm, "spec", "endpoints"))
		if len(eps) == 0 {
			t.Errorf("ServiceMonitor %s has no endpoints", name)
		}
		for _, ep := range eps {
			if !ports[str(get(ep, "port"))] || str(get(ep, "path")) != "/metrics" {
				t.Errorf("ServiceMonitor %s endpoint port %v path %v: want a port of the Service %v and /metrics", name, get(ep, "port"), get(ep, "path"), ports)
			}
		}
	}
}

// optionalKeyRe is a key of secret.example.yaml's "Keys the Deployments
// reference" list that it calls optional.
var optionalKeyRe = regexp.MustCompile(`(?m)^#   ([a-z-]+) +optional\b`)

// optionalSecretKeys returns the Secret keys the example calls optional.
func optionalSecretKeys(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, m := range optionalKeyRe.FindAllStringSubmatch(string(readFile(t, "k8s/secret.example.yaml")), -1) {
		out[m[1]] = true
	}
	return out
}

// k8sList is v as a YAML sequence (nil if it is not one).
func k8sList(v any) []any { l, _ := v.([]any); return l }
