package router

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router/internal/conns"
	"github.com/switchyard/switchyard/router/internal/upstream"
	"github.com/switchyard/switchyard/router/internal/wire"
)

// Request loops. A replica address that names the gateway itself (a
// listed URL, an SRV answer, a Service label mistake) would send each
// request back in, again and again, until connections or memory run out.
// Two guards: such an address is refused when it is configured
// (checkSelfReplicas) or discovered (discoveries.RefuseSelf), and every
// forwarded request carries a Via entry naming this gateway process (RFC
// 9110 §7.6.3), so one that comes back marked is answered 508 instead of
// being forwarded again (looped).

// refuseLoop answers a request that came back to the gateway that sent it.
func (g *Gateway) refuseLoop(w http.ResponseWriter, r *http.Request) {
	g.metrics.Loops.Inc()
	g.log.Warn("request loop: a request this gateway forwarded came back to it; a replica address names the gateway itself",
		"path", wire.Clip(r.URL.Path), "request_id", wire.Clip(r.Header.Get(upstream.HeaderRequestID)))
	wire.WriteErrorFor(w, apiOf(r), &wire.APIError{Status: http.StatusLoopDetected, Type: "server_error", Code: "loop_detected",
		Message: "this request was already forwarded by this gateway and came back to it: a replica address of the pool names the gateway itself; fix the pool's replicas or discovery"})
}

// checkSelfReplicas refuses a config whose listed replicas include the
// gateway's own listener, naming the URL's place in the file.
func checkSelfReplicas(cfg *policy.Config, local []netip.Addr) error {
	var errs []string
	for _, pc := range cfg.Pools {
		for i, r := range pc.Replicas {
			if r.Parsed == nil {
				continue
			}
			if which, self := conns.SelfAddr(conns.Listeners(cfg.Server.Listen, cfg.Server.AdminListen), local, conns.HostPort(r.Parsed.Scheme, r.Parsed.Host)); self {
				line, col := cfg.Position("pools", pc.Name, "replicas", i, "url")
				errs = append(errs, fmt.Sprintf("%s:%d:%d: pool %q: replica %q: url %s is this gateway's own listener (%s): every request sent there would loop",
					cfg.File, line, col, pc.Name, r.Name, r.Parsed.Redacted(), which))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}
