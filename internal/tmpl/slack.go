package tmpl

import (
	"fmt"
	"net/url"
	"strings"
	"text/template"
	"text/template/parse"
)

// Slack's mrkdwn (https://api.slack.com/reference/surfaces/formatting#escaping)
// gives &, < and > a meaning: <!channel>, <@U024BE7LH> and <url|text> are
// mentions and links. Text from a trigger or a model's answer is escaped,
// the three and only the three, as &amp; &lt; &gt;, so that it cannot
// mention anyone nor add or rewrite a link.
var mrkdwnEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// mrkdwn escapes v's text for Slack's mrkdwn.
func mrkdwn(v any) string { return mrkdwnEscaper.Replace(str(v)) }

// slackLink returns a Slack link to u reading text, <u|text>, when u is an
// http or https URL; else text and u as escaped text. In u, & is written
// &amp; (Slack reads it back), and |, <, >, spaces and control characters
// are percent-encoded, so that u cannot end the link, name its text, or
// open a mention.
func slackLink(u, text any) string {
	raw := strings.TrimSpace(str(u))
	p, err := url.Parse(raw)
	if err != nil || (!strings.EqualFold(p.Scheme, "http") && !strings.EqualFold(p.Scheme, "https")) || p.Host == "" {
		return mrkdwn(str(text) + ": " + raw)
	}
	var b strings.Builder
	b.WriteByte('<')
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '&':
			b.WriteString("&amp;")
		case c == '|' || c == '<' || c == '>' || c <= ' ' || c == 0x7f:
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('|')
	b.WriteString(mrkdwn(text))
	b.WriteByte('>')
	return b.String()
}

// TruncateMrkdwn cuts s, mrkdwn text, to at most n bytes on a rune
// boundary and outside an entity (&amp; &lt; &gt;), ending in "…" when it
// cuts.
func TruncateMrkdwn(n int, s string) string {
	if len(s) <= n {
		return s
	}
	body, ell := strings.CutSuffix(truncate(n, s), "…")
	if i := strings.LastIndexByte(body, '&'); i >= 0 && i >= len(body)-len("&amp;")+1 && !strings.Contains(body[i:], ";") {
		body = body[:i]
	}
	if ell {
		return body + "…"
	}
	return body
}

// EscapeActions makes every action of t and of the templates associated
// with it — each {{pipeline}} that prints — print through the function
// fn (one of [Funcs], e.g. "mrkdwn"), unless the pipeline already ends in
// it: the text the template's author wrote is left as it is, and every
// value it prints is escaped, as html/template does for HTML.
func EscapeActions(t *template.Template, fn string) {
	for _, tt := range t.Templates() {
		if tt.Tree != nil {
			escapeList(tt.Tree.Root, fn)
		}
	}
}

func escapeList(l *parse.ListNode, fn string) {
	if l == nil {
		return
	}
	for _, n := range l.Nodes {
		switch x := n.(type) {
		case *parse.ActionNode:
			if len(x.Pipe.Decl) > 0 || endsIn(x.Pipe, fn) {
				continue
			}
			x.Pipe.Cmds = append(x.Pipe.Cmds, &parse.CommandNode{
				NodeType: parse.NodeCommand, Pos: x.Pos,
				Args: []parse.Node{parse.NewIdentifier(fn).SetPos(x.Pos)},
			})
		case *parse.IfNode:
			escapeList(x.List, fn)
			escapeList(x.ElseList, fn)
		case *parse.RangeNode:
			escapeList(x.List, fn)
			escapeList(x.ElseList, fn)
		case *parse.WithNode:
			escapeList(x.List, fn)
			escapeList(x.ElseList, fn)
		case *parse.ListNode:
			escapeList(x, fn)
		}
	}
}

// endsIn reports whether the pipeline's last command is a call of fn.
func endsIn(p *parse.PipeNode, fn string) bool {
	if len(p.Cmds) == 0 {
		return false
	}
	last := p.Cmds[len(p.Cmds)-1]
	id, ok := last.Args[0].(*parse.IdentifierNode)
	return ok && id.Ident == fn
}
