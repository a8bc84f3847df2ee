package router

import (
	"github.com/switchyard/switchyard/router/internal/spans"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// requestSettings returns x's gen_ai.request.* settings (the client's
// model excluded: the upstream spans name the pool's), read from the body
// once.
func (x *exchange) requestSettings() []attribute.KeyValue {
	if x.tel.settings == nil {
		x.tel.settings = spans.GenAIRequest(x.body)
		if len(x.tel.settings) > 0 && x.tel.settings[0].Key == spans.GenAIRequestModel {
			x.tel.settings = x.tel.settings[1:]
		}
	}
	return x.tel.settings
}

// endServerSpan sets the server span's closing attributes and its status,
// by the HTTP server span conventions: Error for a 5xx, and for an
// exchange that came to a 5xx after a 2xx was sent (a stream its replica
// cut, or that shutdown ended, which the client sees as an error event);
// unset for every 4xx, and for a client that went away (499).
// http.response.status_code is the status line sent; when the exchange
// came to another status (as the access log and metrics count it), that is
// switchyard.status_code.
func (g *Gateway) endServerSpan(x *exchange) {
	kvs := make([]attribute.KeyValue, 0, 16)
	kvs = spans.AppendString(kvs, spans.Route, x.route)
	kvs = spans.AppendString(kvs, spans.Pool, x.pool)
	kvs = spans.AppendString(kvs, spans.Replica, x.replica)
	kvs = spans.AppendString(kvs, spans.Class, x.class)
	if x.sent > 0 {
		kvs = append(kvs, spans.HTTPStatus.Int(x.sent))
	}
	if x.status != x.sent {
		kvs = append(kvs, spans.Status.Int(x.status))
	}
	if x.info != nil {
		kvs = spans.AppendString(kvs, spans.GenAIRequestModel, x.info.Model)
		kvs = append(kvs, x.requestSettings()...)
	}
	if x.status >= 500 {
		et := statusLabel(x.status)
		if x.sent > 0 && x.sent < 400 {
			et = spans.ErrTypeStreamCut
		}
		kvs = append(kvs, spans.ErrorType.String(et))
		x.tel.span.SetStatus(codes.Error, x.access.errMsg)
	}
	x.tel.span.SetAttributes(kvs...)
}
