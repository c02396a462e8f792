package router

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/decoder"
)

// CloudEvents: the CloudEvents 1.0 Kafka protocol binding, optional
// (Config.CloudEvents). Binary mode keeps the record value (the payload, or
// its schema registry encoding) and adds the context attributes as headers:
// ce_specversion "1.0", ce_id the event id, ce_source, ce_type the event
// type, ce_time the commit time (RFC 3339, UTC), and content-type.
// Structured mode replaces the value with the JSON event format
// (application/cloudevents+json): the same attributes as members, the
// payload under "data" (a JSON payload as it is, other text as a JSON
// string, a schema registry encoding base64 under "data_base64"). A row
// without an event id or event type is an invalid row: CloudEvents requires
// both. Dead-letter records are never wrapped.

// CloudEventsMode selects the binding's mode.
type CloudEventsMode string

// The modes.
const (
	CloudEventsOff        CloudEventsMode = ""
	CloudEventsBinary     CloudEventsMode = "binary"
	CloudEventsStructured CloudEventsMode = "structured"
)

// CloudEventsModes lists the modes, for option help and validation.
var CloudEventsModes = []string{"none", string(CloudEventsBinary), string(CloudEventsStructured)}

// CloudEvents header names of the Kafka protocol binding (binary mode).
const (
	HeaderCESpecVersion = "ce_specversion"
	HeaderCEID          = "ce_id"
	HeaderCESource      = "ce_source"
	HeaderCEType        = "ce_type"
	HeaderCETime        = "ce_time"
	HeaderContentType   = "content-type"
)

// ContentTypeCloudEventsJSON is the content-type of a structured-mode record.
const ContentTypeCloudEventsJSON = "application/cloudevents+json; charset=UTF-8"

// CloudEvents configures the binding.
type CloudEvents struct {
	// Mode is CloudEventsOff (default), CloudEventsBinary or
	// CloudEventsStructured.
	Mode CloudEventsMode
	// Source is the ce_source attribute; "" is "/walbox/<schema>.<table>"
	// of the row's table.
	Source string
	// DataContentType is the payload's media type (content-type in binary
	// mode, datacontenttype in structured mode); "" is "application/json".
	// walbox sets it from --value-format.
	DataContentType string
}

func (c CloudEvents) enabled() bool { return c.Mode != CloudEventsOff }

// ceCheck marks w invalid when it lacks what CloudEvents requires.
func (r *Router) ceCheck(w *row) {
	switch {
	case !w.hasID || len(w.id) == 0:
		w.fail(r.id.spec, "CloudEvents: ce_id is the event id, and column "+strconv.Quote(r.id.spec)+" is NULL or empty (CloudEvents requires an id)")
	case !w.hasEventType || len(w.eventType) == 0:
		w.fail(r.eventType.spec, "CloudEvents: ce_type is the event type, and column "+strconv.Quote(r.eventType.spec)+" is NULL or empty (CloudEvents requires a type)")
	}
}

// ceApply turns rec into a CloudEvent of the configured mode.
func (r *Router) ceApply(ins *decoder.Insert, rec *kgo.Record, w *row) {
	ce := &r.cfg.CloudEvents
	source := ce.Source
	if source == "" {
		source = "/walbox/" + ins.Relation.QualifiedName()
	}
	ct := ce.DataContentType
	if ct == "" {
		ct = "application/json"
	}
	t := ins.CommitTime.UTC().Format(time.RFC3339Nano)
	if ce.Mode == CloudEventsBinary {
		rec.Headers = append(rec.Headers,
			kgo.RecordHeader{Key: HeaderCESpecVersion, Value: []byte("1.0")},
			kgo.RecordHeader{Key: HeaderCEID, Value: w.id},
			kgo.RecordHeader{Key: HeaderCESource, Value: []byte(source)},
			kgo.RecordHeader{Key: HeaderCEType, Value: w.eventType},
			kgo.RecordHeader{Key: HeaderCETime, Value: []byte(t)},
		)
		if rec.Value != nil {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderContentType, Value: []byte(ct)})
		}
		return
	}
	b := make([]byte, 0, len(rec.Value)+200)
	b = append(b, `{"specversion":"1.0","id":`...)
	b = appendJSONText(b, w.id)
	b = append(b, `,"source":`...)
	b = appendJSONText(b, []byte(source))
	b = append(b, `,"type":`...)
	b = appendJSONText(b, w.eventType)
	b = append(b, `,"time":"`...)
	b = append(b, t...)
	b = append(b, '"')
	switch {
	case rec.Value == nil:
	case r.cfg.Values != nil:
		b = append(b, `,"datacontenttype":`...)
		b = appendJSONText(b, []byte(ct))
		b = append(b, `,"data_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, rec.Value)
		b = append(b, '"')
	case json.Valid(rec.Value):
		b = append(b, `,"datacontenttype":`...)
		b = appendJSONText(b, []byte(ct))
		b = append(b, `,"data":`...)
		b = append(b, rec.Value...)
	default:
		b = append(b, `,"datacontenttype":"text/plain; charset=utf-8","data":`...)
		b = appendJSONText(b, rec.Value)
	}
	b = append(b, '}')
	rec.Value = b
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderContentType, Value: []byte(ContentTypeCloudEventsJSON)})
}

// appendJSONText appends s as a JSON string.
func appendJSONText(b, s []byte) []byte {
	q, _ := json.Marshal(string(s))
	return append(b, q...)
}
