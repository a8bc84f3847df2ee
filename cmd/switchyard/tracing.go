package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Trace export is configured only from the standard OTEL_* environment
// variables (OpenTelemetry SDK environment variable specification). Only
// the trace exporters are linked: OTLP over gRPC and over HTTP (protobuf
// or JSON), and the console exporter.

// traceExporters are the OTEL_TRACES_EXPORTER values understood.
var traceExporters = []string{"otlp", "console", "none"}

// otlpProtocols are the OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL values
// understood; the first is the default, as the specification says.
var otlpProtocols = []string{"http/protobuf", "grpc", "http/json"}

// env reads an OTEL_* variable, trimmed.
func env(key string) string { return strings.TrimSpace(os.Getenv(key)) }

// traceExportersFromEnv returns the exporters OTEL_TRACES_EXPORTER (a
// comma-separated list) names, "none" dropped. Unset, it is "otlp" when an
// OTLP endpoint is set and nothing otherwise: unlike the specification's
// default, a gateway with no OTEL_* variables exports nothing rather than
// trying localhost:4318. OTEL_SDK_DISABLED=true turns everything off.
func traceExportersFromEnv() ([]string, error) {
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	v := env("OTEL_TRACES_EXPORTER")
	if v == "" {
		if env("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, nil
		}
		v = "otlp"
	}
	var names []string
	var errs []error
	for n := range strings.SplitSeq(v, ",") {
		n = strings.ToLower(strings.TrimSpace(n))
		switch {
		case !slices.Contains(traceExporters, n):
			errs = append(errs, fmt.Errorf("OTEL_TRACES_EXPORTER: unknown exporter %q (known: %s)", n, strings.Join(traceExporters, ", ")))
		case n != "none" && !slices.Contains(names, n):
			names = append(names, n)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return names, nil
}

// otlpProtocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf.
func otlpProtocol() (string, error) {
	key := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	p := env(key)
	if p == "" {
		key = "OTEL_EXPORTER_OTLP_PROTOCOL"
		p = env(key)
	}
	if p == "" {
		return otlpProtocols[0], nil
	}
	if !slices.Contains(otlpProtocols, p) {
		return "", fmt.Errorf("%s: unsupported protocol %q (supported: %s)", key, p, strings.Join(otlpProtocols, ", "))
	}
	return p, nil
}

// newTraceExporter builds one exporter. The OTLP exporters read their
// endpoint, headers, timeout, compression and TLS settings from the
// OTEL_EXPORTER_OTLP_[TRACES_]* variables themselves.
func newTraceExporter(ctx context.Context, name string, stdout io.Writer) (sdktrace.SpanExporter, error) {
	if name == "console" {
		return stdouttrace.New(stdouttrace.WithWriter(stdout))
	}
	proto, err := otlpProtocol()
	if err != nil {
		return nil, err
	}
	switch proto {
	case "grpc":
		return otlptracegrpc.New(ctx)
	case "http/json":
		return otlptracehttp.New(ctx, otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON))
	}
	return otlptracehttp.New(ctx, otlptracehttp.WithEncoding(otlptracehttp.EncodingProtobuf))
}

// tracingResource describes this process: service.name "switchyard",
// service.version the binary's, a random service.instance.id, host.name,
// os.type, process.pid, process.executable.name, the Go runtime, the
// container id when there is one, and the SDK. OTEL_RESOURCE_ATTRIBUTES
// and OTEL_SERVICE_NAME are applied last, so they override any of these.
func tracingResource(ctx context.Context) (*resource.Resource, error) {
	return resource.New(ctx,
		resource.WithService(), // service.instance.id (a UUID), and a service.name replaced below
		resource.WithAttributes(semconv.ServiceName("switchyard"), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithOSType(),
		resource.WithProcessPID(),
		resource.WithProcessExecutableName(),
		resource.WithProcessRuntimeName(),
		resource.WithProcessRuntimeVersion(),
		resource.WithContainerID(),
		resource.WithFromEnv(),
	)
}

// startTracing builds and installs a tracer provider from the OTEL_*
// environment. With tracing off (no exporter configured,
// OTEL_TRACES_EXPORTER=none, or OTEL_SDK_DISABLED=true) it installs
// nothing and returns a nil provider. Errors of the SDK and its exporters
// (a collector that cannot be reached, spans dropped) go to log, as do its
// warnings (at debug level, as logr's V(1)). The console exporter writes to
// stdout. The returned shutdown flushes the spans not yet exported, for at
// most 5s.
func startTracing(ctx context.Context, log *slog.Logger, stdout io.Writer) (trace.TracerProvider, func(), error) {
	noop := func() {}
	names, err := traceExportersFromEnv()
	if err != nil || len(names) == 0 {
		return nil, noop, err
	}
	// Before anything is built: OTEL_TRACES_SAMPLER errors are reported
	// through the handler while the provider is made.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Error("opentelemetry error", "error", err.Error())
	}))
	otel.SetLogger(logr.FromSlogHandler(log.Handler()))
	res, err := tracingResource(ctx)
	if err != nil {
		if res == nil {
			return nil, noop, fmt.Errorf("trace resource: %w", err)
		}
		// A partial resource (OTEL_RESOURCE_ATTRIBUTES malformed, no host
		// name) still serves.
		log.Warn("trace resource incomplete", "error", err.Error())
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	var exps []sdktrace.SpanExporter
	for _, n := range names {
		exp, err := newTraceExporter(ctx, n, stdout)
		if err != nil {
			for _, e := range exps {
				_ = e.Shutdown(ctx)
			}
			return nil, noop, fmt.Errorf("trace exporter %q: %w", n, err)
		}
		exps = append(exps, exp)
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Error("trace export at shutdown failed", "error", err.Error())
		}
	}, nil
}
