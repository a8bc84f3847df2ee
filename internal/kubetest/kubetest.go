// Package kubetest runs a real Kubernetes API server for tests: Debian's
// etcd and a kube-apiserver built from k8s.io/kubernetes (see .ci/run),
// both on 127.0.0.1, with a static token, AlwaysAllow authorization and no
// endpoint reconciler; and, for tests that need only the EndpointSlices
// discovery reads, a fake API server that needs no binary (StartSlices).
// Nothing it starts listens beyond loopback or sends anywhere else.
package kubetest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Version is the kube-apiserver the tests run, built by .ci/run from
// k8s.io/kubernetes at this version.
const Version = "v1.37.2"

// The variables that name the binaries, overriding the defaults (etcd on
// PATH, the kube-apiserver in .ci/run's cache).
const (
	EtcdEnv      = "SWITCHYARD_ETCD"
	APIServerEnv = "SWITCHYARD_KUBE_APISERVER"
)

// CacheDir is where .ci/run keeps the kube-apiserver it built:
// $XDG_CACHE_HOME/switchyard/kube-apiserver-VERSION (by default under
// ~/.cache), outside the clone, so it is built once per machine.
func CacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "switchyard", "kube-apiserver-"+Version)
}

// Binaries returns the etcd and kube-apiserver to run. When one is missing
// the test is skipped with one line saying how to get them; under CI=true
// it fails instead (CI must run these tests).
func Binaries(t testing.TB) (etcd, apiserver string) {
	t.Helper()
	var missing []string
	etcd = os.Getenv(EtcdEnv)
	if etcd == "" {
		etcd, _ = exec.LookPath("etcd")
	}
	if !executable(etcd) {
		missing = append(missing, "etcd (apt-get install etcd-server, or set "+EtcdEnv+")")
	}
	apiserver = os.Getenv(APIServerEnv)
	if apiserver == "" && CacheDir() != "" {
		apiserver = filepath.Join(CacheDir(), "kube-apiserver")
	}
	if !executable(apiserver) {
		missing = append(missing, "kube-apiserver "+Version+" (bash .ci/install builds it into "+CacheDir()+", or set "+APIServerEnv+")")
	}
	if len(missing) > 0 {
		msg := "needs a real Kubernetes API server; missing " + strings.Join(missing, " and ")
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return etcd, apiserver
}

func executable(path string) bool {
	if path == "" {
		return false
	}
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Server is a running etcd and kube-apiserver.
type Server struct {
	t   testing.TB
	dir string
	// URL is the API server's address (https://127.0.0.1:PORT), Token the
	// bearer token of its only user (in system:masters; AlwaysAllow lets
	// it do anything anyway).
	URL, Token string
	// Kubeconfig is a kubeconfig file for the server (namespace default),
	// Config the same as a client configuration.
	Kubeconfig string
	Config     *rest.Config
	// Client is a clientset for the server.
	Client kubernetes.Interface

	apiserver string
	args      []string
	// started is how long the last start of the kube-apiserver took.
	started    time.Duration
	etcd, kube *exec.Cmd
}

// Start runs etcd and the kube-apiserver (skipping or failing as Binaries
// says when they are missing) and returns once the server is ready. Both
// stop when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	etcdBin, apiBin := Binaries(t)
	dir := t.TempDir()
	s := &Server{t: t, dir: dir, apiserver: apiBin}
	clientPort, peerPort, apiPort := freePort(t), freePort(t), freePort(t)
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	s.etcd = s.run(etcdBin, "etcd.log", "--name=default", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL, "--logger=zap", "--log-level=warn")
	began := time.Now()
	s.waitFor("etcd", "etcd.log", func() error {
		resp, err := http.Get(etcdURL + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/health: %s", resp.Status)
		}
		return nil
	})

	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		t.Fatal(err)
	}
	s.Token = hex.EncodeToString(tok)
	write(t, filepath.Join(dir, "tokens.csv"), s.Token+",admin,admin,system:masters\n")
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "sa.key"), string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})))
	write(t, filepath.Join(dir, "sa.pub"), string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})))
	s.URL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	s.args = []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=AlwaysAllow",
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--enable-priority-and-fairness=false",
	}
	etcdReady := time.Since(began)
	s.startAPIServer()
	t.Logf("etcd ready in %s, kube-apiserver in %s", etcdReady.Round(time.Millisecond), s.started.Round(time.Millisecond))
	s.Config = &rest.Config{Host: s.URL, BearerToken: s.Token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(dir, "certs", "apiserver.crt")}}
	s.Kubeconfig = filepath.Join(dir, "kubeconfig")
	write(t, s.Kubeconfig, fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster: {server: %q, certificate-authority: %q}
users:
  - name: test
    user: {token: %q}
contexts:
  - name: test
    context: {cluster: test, user: test, namespace: default}
current-context: test
`, s.URL, s.Config.CAFile, s.Token))
	s.Client, err = kubernetes.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startAPIServer starts the kube-apiserver and waits for /readyz.
func (s *Server) startAPIServer() {
	s.t.Helper()
	began := time.Now()
	defer func() { s.started = time.Since(began) }()
	s.kube = s.run(s.apiserver, "kube-apiserver.log", s.args...)
	ca := filepath.Join(s.dir, "certs", "apiserver.crt")
	s.waitFor("kube-apiserver", "kube-apiserver.log", func() error {
		if _, err := os.Stat(ca); err != nil {
			return err
		}
		cfg := &rest.Config{Host: s.URL, BearerToken: s.Token, TLSClientConfig: rest.TLSClientConfig{CAFile: ca}}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return err
		}
		hc.Timeout = 5 * time.Second
		resp, err := hc.Get(s.URL + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
}

// Restart stops the kube-apiserver (SIGTERM, as a rolling restart does)
// and starts it again on the same address; etcd keeps the data.
func (s *Server) Restart() {
	s.t.Helper()
	stop(s.kube)
	s.StartAPIServer()
}

// StopAPIServer stops the kube-apiserver until StartAPIServer.
func (s *Server) StopAPIServer() { stop(s.kube) }

// StartAPIServer starts the kube-apiserver StopAPIServer stopped.
func (s *Server) StartAPIServer() {
	s.t.Helper()
	s.startAPIServer()
	s.t.Logf("kube-apiserver ready again in %s", s.started.Round(time.Millisecond))
}

// run starts a process of the test, logging to dir/log; it is stopped
// when the test ends.
func (s *Server) run(bin, log string, args ...string) *exec.Cmd {
	s.t.Helper()
	f, err := os.OpenFile(filepath.Join(s.dir, log), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		s.t.Fatalf("starting %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	waitsMu.Lock()
	waits[cmd] = done
	waitsMu.Unlock()
	s.t.Cleanup(func() { stop(cmd) })
	return cmd
}

// waits are the running processes' exits.
var (
	waitsMu sync.Mutex
	waits   = map[*exec.Cmd]chan struct{}{}
)

// stop ends a process of the test (SIGTERM, then SIGKILL after 30s) and
// waits for it. Stopping it again does nothing.
func stop(cmd *exec.Cmd) {
	waitsMu.Lock()
	done := waits[cmd]
	delete(waits, cmd)
	waitsMu.Unlock()
	if done == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// startTimeout bounds a server's start on a loaded machine (it takes about
// 4s on an idle one); it is a bound on a failure, not a margin a passing
// run depends on.
const startTimeout = 3 * time.Minute

// waitFor polls ready until it succeeds, failing the test with the log's
// tail when it does not within startTimeout or the process exits.
func (s *Server) waitFor(what, log string, ready func() error) {
	s.t.Helper()
	deadline := time.Now().Add(startTimeout)
	var err error
	for time.Now().Before(deadline) {
		if err = ready(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := os.ReadFile(filepath.Join(s.dir, log))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	s.t.Fatalf("%s not ready after %s: %v\n%s", what, startTimeout, err, b)
}

func write(t testing.TB, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// freePort returns a port free on 127.0.0.1 now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
