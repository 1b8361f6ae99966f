// Command docgen writes the files the packages ship that derive from the
// daemon's flags: the perimeter(8) man page and the commented defaults of
// /etc/perimeter/perimeter.yaml. Both are generated at build time from
// config.FlagSet, so neither can drift from the code.
//
//	go run ./packaging/docgen -man -version 1.2.3 -date 2026-11-25 >perimeter.8
//	go run ./packaging/docgen -config >perimeter.yaml
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/config"
)

func main() {
	man := flag.Bool("man", false, "write the man page perimeter(8)")
	conf := flag.Bool("config", false, "write the commented default /etc/perimeter/perimeter.yaml")
	version := flag.String("version", "", "version named in the man page")
	date := flag.String("date", "", "date of the man page, YYYY-MM-DD (default: $SOURCE_DATE_EPOCH, else today)")
	flag.Parse()
	if *man == *conf {
		fmt.Fprintln(os.Stderr, "docgen: give exactly one of -man and -config")
		os.Exit(2)
	}
	var err error
	if *man {
		d := *date
		if d == "" {
			d = sourceDate().Format("2006-01-02")
		}
		err = writeMan(os.Stdout, *version, d)
	} else {
		err = writeConfig(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}

// sourceDate follows reproducible-builds.org: the same sources give the
// same man page.
func sourceDate() time.Time {
	var sec int64
	if _, err := fmt.Sscan(os.Getenv("SOURCE_DATE_EPOCH"), &sec); err == nil {
		return time.Unix(sec, 0).UTC()
	}
	return time.Now().UTC()
}

type option struct {
	name, arg, usage, def string
	kind                  string // bool, list, unset (no default) or scalar
	settable              bool   // a key of perimeter.yaml
}

// options lists the flags of `perimeter run` in the order of their names.
func options() []option {
	var c config.Config
	fs := c.FlagSet("perimeter", io.Discard)
	var opts []option
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		o := option{name: f.Name, usage: usage, def: f.DefValue, settable: true}
		switch t := fmt.Sprintf("%T", f.Value); {
		case arg == "":
			o.kind = "bool"
		case strings.HasSuffix(t, "listFlag") || strings.HasSuffix(t, "repeatFlag"):
			o.kind, arg = "list", "value"
		case t != "*flag.stringValue" && f.DefValue == "":
			// A number with no default (an AS number): unset unless given.
			o.kind, arg = "unset", "N"
		default:
			o.kind = "scalar"
		}
		o.arg = arg
		// Not settings: --version is an action, --external is always on,
		// --config names the file itself, and an alias would be a second
		// key for one setting.
		if f.Name == "version" || f.Name == "external" || f.Name == "config" || strings.HasPrefix(usage, "alias of ") {
			o.settable = false
		}
		opts = append(opts, o)
	})
	return opts
}

// showDefault says whether the default is worth printing, as
// flag.PrintDefaults does: zero values are not.
func (o option) showDefault() bool {
	switch o.def {
	case "", "false", "0", "0s":
		return false
	}
	return true
}

// yamlValue is the default as a YAML value that reads back as the flag's.
func (o option) yamlValue() string {
	switch o.kind {
	case "bool":
		return o.def
	case "list":
		return "[]"
	case "unset":
		return ""
	}
	if o.def == "" {
		return `""`
	}
	if plainYAML.MatchString(o.def) {
		return o.def
	}
	return fmt.Sprintf("%q", o.def)
}

// plainYAML matches scalars YAML reads as the same string or number
// without quotes ("::" and "0.0.0.0"-like values that are not are quoted).
var plainYAML = regexp.MustCompile(`^[A-Za-z0-9/][A-Za-z0-9/._-]*$`)

func writeConfig(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString(`# /etc/perimeter/perimeter.yaml: settings of the perimeter daemon.
#
# The keys are the flags of "perimeter run" without their dashes; see
# perimeter(8) for each. A flag given on the command line wins over this
# file. Every setting below is commented out and shows its default: uncomment
# and change what you need, then restart (or reload) the daemon.
#
# The daemon reads its cluster credentials from --kubeconfig
# (/etc/perimeter/kubeconfig): mode 0640, owner root, group perimeter.
`)
	for _, o := range options() {
		if !o.settable {
			continue
		}
		fmt.Fprintf(&b, "\n# %s\n", o.usage)
		if v := o.yamlValue(); v == "" {
			fmt.Fprintf(&b, "#%s:\n", o.name)
		} else {
			fmt.Fprintf(&b, "#%s: %s\n", o.name, v)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// roff escapes text for a man page: backslashes, and dashes of options
// (an ASCII minus, so that they can be searched for and pasted).
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = optionDash.ReplaceAllStringFunc(s, func(m string) string { return strings.ReplaceAll(m, "-", `\-`) })
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

var optionDash = regexp.MustCompile(`(^|[\s("'=])--?[a-z][a-z0-9.-]*`)

func writeMan(w io.Writer, version, date string) error {
	var b bytes.Buffer
	src := "perimeter"
	if version != "" {
		src += " " + version
	}
	fmt.Fprintf(&b, ".TH PERIMETER 8 %q %q \"System Administration\"\n", date, src)
	b.WriteString(manHead)
	for _, o := range options() {
		b.WriteString(".TP\n")
		if o.kind == "bool" {
			fmt.Fprintf(&b, ".B %s\n", roff("--"+o.name))
		} else {
			fmt.Fprintf(&b, ".BI %s \"=\" %s\n", roff("--"+o.name), o.arg)
		}
		text := roff(o.usage)
		if !strings.HasSuffix(text, ")") && !strings.HasSuffix(text, ".") {
			text += "."
		}
		b.WriteString(text + "\n")
		if o.showDefault() {
			fmt.Fprintf(&b, "Default: \\fB%s\\fR.\n", roff(o.def))
		}
		if o.settable {
			fmt.Fprintf(&b, "Key in the configuration file: \\fB%s\\fR.\n", o.name)
		}
	}
	b.WriteString(manTail)
	_, err := w.Write(b.Bytes())
	return err
}

const manHead = `.SH NAME
perimeter \- ingress for Kubernetes on edge hosts, driving HAProxy and BGP
.SH SYNOPSIS
.B perimeter
.RB [ run ]
.RI [ options ]
.br
.B perimeter render
.RI [ options ]
.br
.B perimeter explain
.B \-\-host
.I host
.B \-\-path
.I path
.RI [ options ]
.br
.B perimeter bgp status
.RI [ options ]
.br
.B perimeter routes flush
.RI [ options ]
.br
.B perimeter version
.SH DESCRIPTION
.B perimeter
runs on an edge host outside a Kubernetes cluster. It watches the cluster
through a kubeconfig (Ingresses, IngressClasses, Services, EndpointSlices and
the Secrets and ConfigMaps they reference) and drives a local
.BR haproxy (1):
it writes its configuration and map files, reloads it without dropping
connections when the structure changes, and applies everything else (server
addresses and states, map entries) through HAProxy's Runtime API.
.PP
With
.B \-\-bgp\-local\-as
set, an embedded BGP speaker peers with the cluster's nodes (Calico), learns
the pod blocks and installs them as kernel routes of protocol
.B perimeter
(201), so HAProxy sends traffic straight to pod addresses.
.PP
Flag, ConfigMap key and annotation names are those of the HAProxy Kubernetes
Ingress Controller in external mode.
.SH COMMANDS
.TP
.B run
Run the daemon (the default command). It notifies systemd when the first
full configuration is served, and pets its watchdog while the sync loop is
healthy.
.TP
.B render
Print the
.I haproxy.cfg
and map files the daemon would apply to the cluster's current state.
.TP
.B explain \-\-host \fIhost\fB \-\-path \fIpath\fR
Say which Ingress, rule and backend a request for
.I host
and
.I path
reaches.
.TP
.B bgp status
Print the peers and routes of the running daemon's BGP speaker, asked on its
controller port.
.TP
.B routes flush
Remove the routes of protocol 201 that the daemon installed (in the main
table, or
.BR \-\-route\-table ),
with the daemon stopped.
.TP
.B version
Print the version.
.SH OPTIONS
Every command takes the options below. A list option may be repeated or
given comma-separated.
`

const manTail = `.SH FILES
.TP
.I /etc/perimeter/perimeter.yaml
Settings of the daemon; its keys are the option names above, and options
given on the command line win over it.
.TP
.I /etc/perimeter/kubeconfig
Credentials for the cluster (default of
.BR \-\-kubeconfig ).
It must be readable by the group
.BR perimeter ;
the identity needs the permissions of the
.I rbac.yaml
shipped with the documentation.
.TP
.I /var/lib/perimeter
The generated
.IR haproxy.cfg ,
maps and certificates (default of
.BR \-\-config\-dir ).
.TP
.I /run/perimeter
HAProxy's master and stats sockets and pid file (default of
.BR \-\-runtime\-dir ).
.TP
.I /etc/iproute2/rt_protos.d/perimeter.conf
Names protocol 201, so that
.B ip route show proto perimeter
lists the routes the daemon installed.
.SH SIGNALS
.TP
.BR SIGTERM ", " SIGINT
Stop: HAProxy finishes its connections and exits, the BGP speaker closes its
sessions and removes its routes (unless
.BR \-\-bgp\-keep\-routes\-on\-exit ),
then the daemon exits.
.TP
.B SIGUSR1
Hand-over: the daemon exits and leaves HAProxy serving and its routes in
place; the daemon started next adopts both and reloads HAProxy without
dropping a connection. The systemd unit sends it on
.BR "systemctl restart" .
.SH EXIT STATUS
0 on success, 1 on a fatal error (printed as one line), 2 on a usage error.
.SH EXAMPLES
Start the packaged service, check it and list the routes it installed:
.PP
.nf
.RS
systemctl start perimeter
systemctl status perimeter
ip route show proto perimeter
.RE
.fi
.SH SEE ALSO
.BR haproxy (1),
.BR ip\-route (8),
.BR systemctl (1),
.BR systemd.service (5)
`
