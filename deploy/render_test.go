package deploy

import (
	"bytes"
	"fmt"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The manifests are rendered in the test process by the libraries that
// `kustomize build` and `helm template` are made of, at the versions go.mod
// pins (docs/deploy.md names them; TestRendererVersions keeps the two in
// step). Compiling them into the test binary costs a fraction of building
// the two commands, and nothing is fetched or built while the tests run.
var rendererModules = []string{"sigs.k8s.io/kustomize/api", "helm.sh/helm/v3"}

// renderKustomize renders the kustomization in dir as `kustomize build dir`
// does with its default flags: files only from under dir, no plugins, the
// output in the legacy order (Namespaces first).
func renderKustomize(t *testing.T, dir string) *rendering {
	t.Helper()
	return decode(t, "kustomize build "+dir, kustomizeYAML(t, dir))
}

// kustomizeYAML is the output of `kustomize build dir`.
func kustomizeYAML(t *testing.T, dir string) []byte {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return out
}

// helmTemplate renders the chart as `helm template switchyard CHART
// --namespace switchyard --set S...` does for each S of sets: the chart
// loaded and checked installable, the values merged, the templates rendered
// against Helm's default capabilities (no cluster), NOTES.txt left out, and
// the manifests and hooks written in Helm's install order, each after a
// "# Source:" line.
func helmTemplate(t *testing.T, sets ...string) ([]byte, error) {
	t.Helper()
	ch, err := loader.Load(chartPath)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	if typ := ch.Metadata.Type; typ != "" && typ != "application" {
		t.Fatalf("%s: chart type %q is not installable", chartPath, typ)
	}
	if len(ch.Metadata.Dependencies) > 0 {
		t.Fatalf("%s: the chart has dependencies, which this rendering does not fetch", chartPath)
	}
	vals := map[string]any{}
	for _, s := range sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			t.Fatalf("--set %s: %v", s, err)
		}
	}
	return renderChart(ch, vals)
}

// renderChart is the part of `helm template` after the values are read
// (helm's action.Install.RunWithContext and Configuration.renderResources,
// client only).
func renderChart(ch *chart.Chart, vals map[string]any) ([]byte, error) {
	if err := chartutil.ProcessDependenciesWithMerge(ch, vals); err != nil {
		return nil, err
	}
	caps := chartutil.DefaultCapabilities.Copy()
	if v := ch.Metadata.KubeVersion; v != "" && !chartutil.IsCompatibleRange(v, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("chart requires kubeVersion %s, incompatible with Kubernetes %s", v, caps.KubeVersion.String())
	}
	opts := chartutil.ReleaseOptions{Name: "switchyard", Namespace: helmNamespace, Revision: 1, IsInstall: true}
	values, err := chartutil.ToRenderValuesWithSchemaValidation(ch, vals, opts, caps, false)
	if err != nil {
		return nil, err
	}
	var e engine.Engine
	files, err := e.Render(ch, values)
	if err != nil {
		return nil, err
	}
	for name := range files {
		if path.Base(name) == "NOTES.txt" {
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, m := range manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, m.Content)
	}
	for _, h := range hooks {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return b.Bytes(), nil
}

func renderHelm(t *testing.T, sets ...string) *rendering {
	t.Helper()
	out, err := helmTemplate(t, sets...)
	if err != nil {
		t.Fatalf("helm template --set %s: %v", strings.Join(sets, " --set "), err)
	}
	return decode(t, "helm template --set "+strings.Join(sets, " --set "), out)
}

// TestRendererVersions: docs/deploy.md names the versions of kustomize's
// and Helm's libraries that the module builds with.
func TestRendererVersions(t *testing.T) {
	cmd := exec.Command("go", append([]string{"list", "-m", "-f", "{{.Path}} {{.Version}}"}, rendererModules...)...)
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", strings.Join(rendererModules, " "), err)
	}
	doc := string(readFile(t, "../docs/deploy.md"))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(rendererModules) {
		t.Fatalf("go list -m: %q, want a line for each of %v", out, rendererModules)
	}
	for _, line := range lines {
		mod, version, _ := strings.Cut(line, " ")
		if want := "`" + mod + "` " + version; !strings.Contains(doc, want) {
			t.Errorf("docs/deploy.md does not say %s (the version go.mod requires)", want)
		}
	}
}

// TestCIPrebuildsTheTools: the tools .ci/run runs with `go run
// MODULE@VERSION` are the ones it builds in the background beforehand, so
// that `go run` finds them in the build cache; it builds no other (the
// manifests' renderers are libraries now).
func TestCIPrebuildsTheTools(t *testing.T) {
	ci := string(readFile(t, "../.ci/run"))
	var run, prebuilt []string
	for _, m := range regexp.MustCompile(`go run ([^\s@]+@v[^\s]+)`).FindAllStringSubmatch(ci, -1) {
		run = append(run, m[1])
	}
	loop := regexp.MustCompile(`(?s)for tool in (.*?); do`).FindStringSubmatch(ci)
	if loop == nil {
		t.Fatal(".ci/run: no `for tool in ...; do` prebuild loop")
	}
	prebuilt = strings.Fields(strings.ReplaceAll(loop[1], "\\\n", " "))
	slices.Sort(run)
	slices.Sort(prebuilt)
	if len(run) == 0 || !slices.Equal(slices.Compact(run), prebuilt) {
		t.Errorf(".ci/run runs %v with go run but prebuilds %v", run, prebuilt)
	}
	for _, mod := range rendererModules {
		if strings.Contains(ci, mod) {
			t.Errorf(".ci/run mentions %s, which the tests compile in as a library", mod)
		}
	}
}
