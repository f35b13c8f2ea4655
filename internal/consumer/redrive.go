package consumer

import (
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// HeaderRedrive, on a trigger, says that a person redrove it from the dead
// letter at this sequence of its dead-letter stream (package admin). The
// trigger is otherwise what arrived: its payload and its headers, less the
// dead letter's own.
const HeaderRedrive = "Oncegate-Redrive"

// RedriveHeaders returns the headers a redrive of a dead letter with
// headers h republishes: the trigger's own, that is all but the dead
// letter's (Oncegate-Reason, -Detail, ...) and the server's Nats-* ones.
// The trigger's Nats-Msg-Id, kept as Oncegate-Msg-Id, is not restored:
// the trigger stream would drop it as a duplicate within its window.
func RedriveHeaders(h nats.Header) nats.Header {
	out := nats.Header{}
	for k, vs := range h {
		switch {
		case len(k) >= 5 && strings.EqualFold(k[:5], "Nats-"):
		case strings.EqualFold(k, HeaderRedrive):
		case isDeadLetterHeader(k):
		default:
			out[k] = append([]string(nil), vs...)
		}
	}
	return out
}

func isDeadLetterHeader(k string) bool {
	for _, h := range deadLetterHeaders {
		if strings.EqualFold(h, k) {
			return true
		}
	}
	return false
}

// RedriveID is the Nats-Msg-Id of the gen-th redrive of the dead letter at
// sequence seq of stream: a redrive retried after a lost answer publishes
// it again under the same id, and the trigger stream keeps one.
func RedriveID(stream string, seq uint64, gen int) string {
	return "redrive:" + stream + ":" + strconv.FormatUint(seq, 10) + ":" + strconv.Itoa(gen)
}
