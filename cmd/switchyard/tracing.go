package main

import (
	"context"
	"os"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// tracingConfigured reports whether the standard OTEL_* variables ask for
// trace export. Without them tracing stays off and costs nothing.
func tracingConfigured() bool {
	switch os.Getenv("OTEL_TRACES_EXPORTER") {
	case "none":
		return false
	case "":
		return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	}
	return true
}

// setupTracing builds a tracer provider from the OTEL_* environment
// (OTEL_TRACES_EXPORTER=otlp|console|none, OTEL_EXPORTER_OTLP_PROTOCOL=
// http/protobuf|grpc, OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER…). It returns nil when
// tracing is not configured, and a shutdown that flushes spans.
func setupTracing(ctx context.Context) (trace.TracerProvider, func(), error) {
	if !tracingConfigured() {
		return nil, func() {}, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, func() {}, err
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return nil, func() {}, nil
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName("switchyard"), semconv.ServiceVersion(version)))
	if err != nil {
		return nil, func() {}, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}, nil
}
