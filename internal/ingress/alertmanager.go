package ingress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/prometheus/common/model"
)

// splitAlerts turns one Alertmanager notification (webhook payload
// version 4: receiver, status, alerts, groupLabels, commonLabels,
// commonAnnotations, externalURL, groupKey, truncatedAlerts; Grafana's
// adds its own members) into one trigger per alert.
//
// Each trigger's body is the notification with "alerts" replaced by
// "alert", the one alert, and "status" set to that alert's status. The
// alert is as Alertmanager sent it, with two members added when it lacks
// them: "fingerprint" (older Alertmanagers sent none; derived from the
// labels as Alertmanager derives it, see fingerprint) and "occurrence",
// set to its startsAt, which is what tells one firing of an alert from
// the next (Alertmanager repeats startsAt in every notification of the
// same firing). The members keep the bytes they came with: the body is
// assembled, not re-encoded.
//
// The delivery id is fingerprint/startsAt/status: a re-sent notification
// publishes the same ids, which the stream's duplicate window drops, and
// an alert that resolves is a new delivery.
func splitAlerts(body []byte) ([]trigger, error) {
	n, err := readNotification(body)
	if err != nil {
		return nil, err
	}
	if len(n.alerts) == 0 {
		return nil, errors.New("an Alertmanager notification needs a non-empty alerts array")
	}
	// The members every trigger shares, as they came.
	shared := make([]byte, 0, len(body))
	shared = append(shared, '{')
	for _, m := range n.shared {
		shared = append(shared, m...)
		shared = append(shared, ',')
	}
	out := make([]trigger, 0, len(n.alerts))
	for i, a := range n.alerts {
		var status, startsAt, fp string
		if json.Unmarshal(a.status, &status) != nil || status == "" {
			return nil, fmt.Errorf("alerts[%d] has no status", i)
		}
		if json.Unmarshal(a.startsAt, &startsAt) != nil || startsAt == "" {
			return nil, fmt.Errorf("alerts[%d] has no startsAt", i)
		}
		var add []byte // the members the alert lacks
		if a.fingerprint != nil {
			if json.Unmarshal(a.fingerprint, &fp) != nil || fp == "" {
				return nil, fmt.Errorf("alerts[%d].fingerprint is not a string", i)
			}
		} else {
			var labels map[string]string
			if json.Unmarshal(a.labels, &labels) != nil || len(labels) == 0 {
				return nil, fmt.Errorf("alerts[%d] has neither a fingerprint nor labels", i)
			}
			fp = fingerprint(labels)
			add = append(add, `"fingerprint":"`...)
			add = append(add, fp...) // hex digits
			add = append(add, `",`...)
		}
		if !a.occurrence {
			add = append(add, `"occurrence":`...)
			add = append(add, a.startsAt...)
			add = append(add, ',')
		}
		id := fp + "/" + startsAt + "/" + status
		if len(id) > maxDeliveryID || strings.ContainsAny(id, "\r\n\x00") {
			return nil, fmt.Errorf("alerts[%d]: the id from its fingerprint, startsAt and status is over %d bytes or has a control character", i, maxDeliveryID)
		}
		if len(status) > maxDeliveryID || strings.ContainsAny(status, "\r\n\x00") {
			status = ""
		}
		inner := bytes.TrimSpace(a.raw[1 : len(a.raw)-1])
		b := make([]byte, 0, len(shared)+len(inner)+len(add)+len(a.status)+24)
		b = append(b, shared...)
		b = append(b, `"alert":{`...)
		b = append(b, add...)
		if len(inner) > 0 {
			b = append(b, inner...)
		} else if len(add) > 0 {
			b = b[:len(b)-1] // no members of its own: drop the last comma
		}
		b = append(b, `},"status":`...)
		b = append(b, a.status...)
		b = append(b, '}')
		out = append(out, trigger{delivery: id, event: status, body: b})
	}
	return out, nil
}

// notification is what splitAlerts reads of a notification: its members
// but "alerts" and "status", and its alerts, all as slices of the body.
type notification struct {
	shared [][]byte // `"name":value`
	alerts []alert
}

// alert is what splitAlerts reads of one alert: its members, as they
// came (nil when absent).
type alert struct {
	raw                           []byte // the object
	status, startsAt, fingerprint []byte
	labels                        []byte
	occurrence                    bool
}

var errNotAlertmanager = errors.New("an Alertmanager notification is a JSON object with an alerts array")

// readNotification reads a notification in one pass. Names are matched
// exactly; the members splitAlerts reads may not come twice.
func readNotification(body []byte) (notification, error) {
	var n notification
	dec := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true))
	// value returns the value just read, as a slice of body (the
	// decoder's own is valid until its next read), from the offset
	// before it: what follows, less any colon, comma and space.
	value := func(from int64) []byte {
		return bytes.TrimLeft(body[from:dec.InputOffset()], " \t\r\n:,")
	}
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return n, errNotAlertmanager
	}
	seen := 0
	for dec.PeekKind() == '"' {
		start := dec.InputOffset()
		tok, err := dec.ReadToken()
		if err != nil {
			return n, errNotAlertmanager
		}
		switch tok.String() {
		case "alerts":
			if seen&1 != 0 {
				return n, errors.New("the notification has two alerts arrays")
			}
			seen |= 1
			if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '[' {
				return n, errNotAlertmanager
			}
			for dec.PeekKind() != ']' {
				a, err := readAlert(dec, value)
				if err != nil {
					return n, fmt.Errorf("alerts[%d] %w", len(n.alerts), err)
				}
				n.alerts = append(n.alerts, a)
			}
			if _, err := dec.ReadToken(); err != nil {
				return n, errNotAlertmanager
			}
		case "status", "alert":
			// The trigger's own; the notification's is dropped.
			if err := dec.SkipValue(); err != nil {
				return n, errNotAlertmanager
			}
		default:
			if err := dec.SkipValue(); err != nil {
				return n, errNotAlertmanager
			}
			n.shared = append(n.shared, value(start))
		}
	}
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '}' {
		return n, errNotAlertmanager
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return n, errNotAlertmanager
	}
	return n, nil
}

// readAlert reads one alert, the decoder at its start.
func readAlert(dec *jsontext.Decoder, value func(int64) []byte) (alert, error) {
	var a alert
	start := dec.InputOffset()
	if dec.PeekKind() != '{' {
		return a, errors.New("is not a JSON object")
	}
	if _, err := dec.ReadToken(); err != nil {
		return a, fmt.Errorf("does not parse: %w", err)
	}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return a, fmt.Errorf("does not parse: %w", err)
		}
		name := tok.String() // the token is valid until the next read
		from := dec.InputOffset()
		if err := dec.SkipValue(); err != nil {
			return a, fmt.Errorf("does not parse: %w", err)
		}
		var dst *[]byte
		switch name {
		case "status":
			dst = &a.status
		case "startsAt":
			dst = &a.startsAt
		case "fingerprint":
			dst = &a.fingerprint
		case "labels":
			dst = &a.labels
		case "occurrence":
			a.occurrence = true
		}
		if dst != nil {
			if *dst != nil {
				return a, fmt.Errorf("has two %s members", name)
			}
			*dst = value(from)
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return a, fmt.Errorf("does not parse: %w", err)
	}
	a.raw = value(start)
	return a, nil
}

// fingerprint is Alertmanager's fingerprint of an alert's labels, the one
// it sends in the field of that name: prometheus/common's
// LabelSet.Fingerprint (a 64-bit FNV-1a over the sorted names and
// values), in 16 hex digits. So a sender that mixes notifications with and
// without the field gets one id for one alert.
func fingerprint(labels map[string]string) string {
	ls := make(model.LabelSet, len(labels))
	for k, v := range labels {
		ls[model.LabelName(k)] = model.LabelValue(v)
	}
	return ls.Fingerprint().String()
}

// SplitAlertmanager turns one Alertmanager notification (the body of its
// webhook, several alerts per group) into the triggers the ingress
// publishes for it, one per alert, in order: what `config check -sample`
// previews. A body that is not a notification is an error.
func SplitAlertmanager(body []byte) ([][]byte, error) {
	ts, err := splitAlerts(body)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(ts))
	for i, t := range ts {
		out[i] = t.body
	}
	return out, nil
}
