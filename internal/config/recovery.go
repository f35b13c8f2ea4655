package config

// Admin configures the admin service a running consumer serves on NATS
// (package admin): ledger records, pending leases, dead letters, redrive
// and forget, for the command line and the console.
type Admin struct {
	// Subject is the subject prefix of the service: its endpoints are
	// <subject>.<stream name>.<operation>. Restrict who may publish to it
	// with NATS permissions; with the embedded server, its secret
	// (nats.token_file and the others) is what a client must present. The
	// default is "oncegate.admin".
	Subject string `yaml:"subject"`
	// Off turns the service off. The default is false: on.
	Off bool `yaml:"off"`
}

// Console configures the console: a small web page of dead letters (with
// redrive and forget), key lookups, pending leases, outbox entries waiting
// for approval, and the cache's figures. It is off unless Listen is set.
type Console struct {
	// Listen is the address the console serves on, such as
	// "127.0.0.1:9465"; without a host (":9465") it is on loopback, and
	// every interface must be asked for ("0.0.0.0:9465"). Empty (the
	// default) turns the console off.
	Listen string `yaml:"listen"`
	// TokenFile is a file of the tokens operators sign in with to change
	// anything (redrive, forget, approve, cancel): one a line, "name
	// token", so that every change is by the operator who signed in; or
	// one token alone, whose operator is named "operator". It must be
	// readable by its owner alone (chmod 600), each token at least 20
	// bytes, each name lower-case letters, digits, '-' and '_', given
	// once, and no token twice; blank lines and lines starting with '#'
	// are skipped. The default, none, takes the tokens from
	// ONCEGATE_CONSOLE_TOKEN, in the same format; without either the
	// console is read-only.
	TokenFile string `yaml:"token_file"`
}

// EnvConsoleToken is the environment variable that holds the console's
// operators' tokens (one token, or "name token" lines) when
// console.token_file is not set.
const EnvConsoleToken = "ONCEGATE_CONSOLE_TOKEN"

// DefaultAdminSubject is admin.subject's default.
const DefaultAdminSubject = "oncegate.admin"

func (c *Config) recoveryDefaults() {
	setDefault(c, "admin.subject", &c.Admin.Subject, DefaultAdminSubject)
}

func (v *validator) recovery() {
	if err := checkSubject(v.c.Admin.Subject, true); err != nil {
		v.add("admin.subject", err)
	}
	if l := v.c.Console.Listen; l != "" {
		if err := checkListen(l, false); err != nil {
			v.add("console.listen", err)
		}
		if v.c.Admin.Off {
			v.add("console.listen", invalid("the console needs the admin service: admin.off is set"))
		}
	}
}

func (x *explainer) recovery() {
	c := x.c
	if c.Admin.Off {
		x.row("admin", "off")
	} else {
		x.row("admin", "NATS micro service "+x.d("admin.subject", c.Admin.Subject, c.Admin.Subject)+"."+c.Stream.Name+".>",
			"whoever may publish there: restrict it with NATS permissions")
	}
	switch {
	case c.Console.Listen == "":
		x.row("console", "off (set console.listen to serve it)")
	case c.Console.TokenFile != "":
		x.row("console", "http://"+c.Console.Listen, "changes need an operator's token from "+c.Console.TokenFile)
	default:
		x.row("console", "http://"+c.Console.Listen, "changes need an operator's token from $"+EnvConsoleToken+" (read-only without it)")
	}
}
