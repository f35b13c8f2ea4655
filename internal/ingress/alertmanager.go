package ingress

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// splitAlerts turns one Alertmanager notification (webhook payload
// version 4: receiver, status, alerts, groupLabels, commonLabels,
// commonAnnotations, externalURL, groupKey, truncatedAlerts) into one
// trigger per alert.
//
// Each trigger's body is the notification with "alerts" replaced by
// "alert", the one alert, and "status" set to that alert's status. The
// alert is as Alertmanager sent it, with two members added when it lacks
// them: "fingerprint" (older Alertmanagers sent none; derived from the
// labels) and "occurrence", set to its startsAt, which is what tells one
// firing of an alert from the next (Alertmanager repeats startsAt in every
// notification of the same firing).
//
// The delivery id is fingerprint/startsAt/status: a re-sent notification
// publishes the same ids, which the stream's duplicate window drops, and
// an alert that resolves is a new delivery.
func splitAlerts(body []byte) ([]trigger, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, errors.New("an Alertmanager notification is a JSON object")
	}
	var alerts []map[string]json.RawMessage
	if err := json.Unmarshal(top["alerts"], &alerts); err != nil || len(alerts) == 0 {
		return nil, errors.New("an Alertmanager notification needs a non-empty alerts array")
	}
	delete(top, "alerts")
	out := make([]trigger, 0, len(alerts))
	for i, a := range alerts {
		var status, startsAt, fp string
		if json.Unmarshal(a["status"], &status) != nil || status == "" {
			return nil, fmt.Errorf("alerts[%d] has no status", i)
		}
		if json.Unmarshal(a["startsAt"], &startsAt) != nil || startsAt == "" {
			return nil, fmt.Errorf("alerts[%d] has no startsAt", i)
		}
		if raw, ok := a["fingerprint"]; ok {
			if json.Unmarshal(raw, &fp) != nil || fp == "" {
				return nil, fmt.Errorf("alerts[%d].fingerprint is not a string", i)
			}
		} else {
			var labels map[string]string
			if json.Unmarshal(a["labels"], &labels) != nil || len(labels) == 0 {
				return nil, fmt.Errorf("alerts[%d] has neither a fingerprint nor labels", i)
			}
			canon, _ := json.Marshal(labels) // map keys are sorted
			sum := sha256.Sum256(canon)
			fp = hex.EncodeToString(sum[:8])
			a["fingerprint"], _ = json.Marshal(fp)
		}
		if _, ok := a["occurrence"]; !ok {
			a["occurrence"] = a["startsAt"]
		}
		alert, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("alerts[%d]: %w", i, err)
		}
		top["alert"] = alert
		top["status"] = a["status"]
		b, err := json.Marshal(top)
		if err != nil {
			return nil, fmt.Errorf("alerts[%d]: %w", i, err)
		}
		t, err := one(fp+"/"+startsAt+"/"+status, "the alert's fingerprint, startsAt and status", status, b)
		if err != nil {
			return nil, err
		}
		out = append(out, t[0])
	}
	return out, nil
}
