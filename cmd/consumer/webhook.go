package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ingress"
)

// runWebhook is "consumer webhook sign": it prints the headers a provider
// would send with the payload on standard input, signed with the source's
// secret, one "Name: value" a line, as curl -H @FILE reads them.
func runWebhook(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "sign" {
		fmt.Fprintln(stderr, "usage: consumer webhook sign -source NAME [flags] < payload.json")
		return flag.ErrHelp
	}
	fs := flag.NewFlagSet("webhook sign", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		file   = fs.String("config", "", "configuration `file` (default: the built-in configuration)")
		name   = fs.String("source", "", "the ingress source to sign for (required)")
		id     = fs.String("id", "", "delivery `id`, for a source that takes it from a header (default: a new random one, as a provider mints one per delivery)")
		event  = fs.String("event", "", "event `type`, for a source that takes it from a header (github: push, sentry: issue, shopify: orders/create by default)")
		tenant = fs.String("tenant", "", "the `tenant`, for a source with a secret per tenant")
		query  = fs.String("query", "", "the query string of the URL the provider calls, without ?, for a signature over {url}")
		keyEnv = fs.String("private-key-env", "", "the environment `variable` holding the provider's private key, for an ed25519 source (whose secret is the public key)")
		at     = fs.Int64("time", 0, "signing time, Unix seconds (default: now)")
		maxLen = int64(config.DefaultIngressMaxBody) * 16
	)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: consumer webhook sign -source NAME [flags] < payload.json\n\n"+
			"Prints the headers a provider would send with the payload, signed with the source's secret (read from\n"+
			"its secret_env or secret_file). With the ingress running:\n\n"+
			"  consumer webhook sign -source github < examples/github-push.json > headers.txt\n"+
			"  curl -H @headers.txt --data-binary @examples/github-push.json http://127.0.0.1:8080/hooks/github\n\n"+
			"A form payload (slack, twilio) is signed as a form. A timestamp in the body (linear's webhookTimestamp)\n"+
			"is the payload's own: make it recent.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *name == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("webhook sign: -source is required, and takes no arguments")
	}
	cfg, err := config.Load(*file)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(cfg.Ingress.Sources, func(s config.Source) bool { return s.Name == *name })
	if i < 0 {
		names := make([]string, len(cfg.Ingress.Sources))
		for j, s := range cfg.Ingress.Sources {
			names[j] = s.Name
		}
		return fmt.Errorf("webhook sign: no source %q (the sources are: %s)", *name, strings.Join(names, ", "))
	}
	src := cfg.Ingress.Sources[i]
	body, err := io.ReadAll(io.LimitReader(stdin, maxLen+1))
	if err != nil {
		return err
	}
	if int64(len(body)) > maxLen {
		return fmt.Errorf("webhook sign: the payload is over %d bytes", maxLen)
	}
	// A source with auth: none checks no signature; the one printed is
	// made with a placeholder secret.
	secret := []byte("whsec_dW5zaWduZWQ=")
	r := src.Resolved()
	switch {
	case r.Auth == config.AuthNone:
	case r.Auth == config.AuthSignature && r.Signature.Algorithm == "ed25519":
		if *keyEnv == "" || os.Getenv(*keyEnv) == "" {
			return fmt.Errorf("webhook sign: source %s verifies ed25519 signatures with a public key: give the private key with -private-key-env", src.Name)
		}
		secret = []byte(os.Getenv(*keyEnv))
	default:
		if secret, err = ingress.SourceSecret(src, *tenant, os.Getenv); err != nil {
			return err
		}
	}
	now := time.Now()
	if *at != 0 {
		now = time.Unix(*at, 0)
	}
	if *id == "" {
		*id = newDeliveryID(src.Kind)
	}
	h, err := ingress.SignDelivery(src, ingress.Delivery{Secret: secret, Body: body, Time: now, ID: *id, Event: *event, Tenant: *tenant, Query: *query})
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range h[k] {
			fmt.Fprintf(stdout, "%s: %s\n", k, v)
		}
	}
	return nil
}

// newDeliveryID mints a delivery id in the provider's style: a UUID for
// GitHub and Sentry, msg_… for Standard Webhooks.
func newDeliveryID(kind string) string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	u := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
	if kind == config.KindStandard {
		return "msg_" + strings.ReplaceAll(u, "-", "")
	}
	return u
}
