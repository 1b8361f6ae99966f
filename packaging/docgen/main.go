// Command docgen writes the man page perimeter(8) from the daemon's flags
// and configuration keys (config.Keys), at package build time, so that it
// cannot drift from the code; and it collects the licenses of the Go modules
// linked into the static binary, whose notices must ship with it.
//
//	go run ./packaging/docgen -version 1.2.3 -date 2026-11-25 >perimeter.8
//	go run ./packaging/docgen -licenses DIR path/to/perimeter
//
// The other generated file of the packages, the commented default
// /etc/perimeter/perimeter.yaml, is `perimeter config-reference --format=yaml`.
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
	version := flag.String("version", "", "version named in the man page")
	date := flag.String("date", "", "date of the man page, YYYY-MM-DD (default: $SOURCE_DATE_EPOCH, else today)")
	licenses := flag.String("licenses", "", "instead of the man page: copy the license and notice files of every module linked into the binary given as argument into this directory")
	flag.Parse()
	if *licenses != "" {
		if err := copyLicenses(flag.Arg(0), *licenses); err != nil {
			fmt.Fprintln(os.Stderr, "docgen:", err)
			os.Exit(1)
		}
		return
	}
	d := *date
	if d == "" {
		d = sourceDate().Format("2006-01-02")
	}
	if err := writeMan(os.Stdout, *version, d); err != nil {
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

// argName is the placeholder of an option's value in the synopsis.
func argName(k config.Key) string {
	switch k.Kind {
	case config.KindInt, config.KindUint:
		return "N"
	case config.KindDuration:
		return "DURATION"
	case config.KindList:
		return "VALUE"
	}
	return "STRING"
}

// showDefault says whether the default is worth printing, as
// flag.PrintDefaults does: zero values are not.
func showDefault(def string) bool {
	switch def {
	case "", "false", "0", "0s":
		return false
	}
	return true
}

// roff escapes text for a man page: backslashes, and the dashes of options
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
	// Paths and option names must not be hyphenated or stretched.
	b.WriteString(".nh\n.ad l\n")
	b.WriteString(manHead)
	for _, k := range config.Keys() {
		b.WriteString(".TP\n")
		if k.Kind == config.KindBool {
			fmt.Fprintf(&b, ".B %s\n", roff("--"+k.Name))
		} else {
			fmt.Fprintf(&b, "\\fB%s\\fR=\\fI%s\\fR\n", roff("--"+k.Name), argName(k))
		}
		text := k.Usage
		if k.Alias != "" {
			text = "Another name of --" + k.Alias
		}
		text = roff(strings.ToUpper(text[:1]) + text[1:])
		if !strings.HasSuffix(text, ".") {
			text += "."
		}
		b.WriteString(text + "\n")
		if showDefault(k.Default) {
			fmt.Fprintf(&b, "Default: \\fB%s\\fR.\n", roff(k.Default))
		}
		switch {
		case k.FlagOnly:
			b.WriteString("Command line only.\n")
		case k.Alias != "":
		case k.Live:
			b.WriteString("A reload applies a change.\n")
		default:
			b.WriteString("A change needs a restart.\n")
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
.B perimeter config\-reference
.RB [ \-\-format=markdown | \-\-format=yaml ]
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
.B config\-reference
Print the reference of the configuration file (Markdown), or with
.B \-\-format=yaml
the file with every key commented out, as the package installs it.
.TP
.B version
Print the version.
.SH OPTIONS
Every command takes the options below. Each, except those marked command
line only, is also a key of the configuration file, named as the option
without its dashes; an option given on the command line wins over the key.
A list option may be repeated.
`

const manTail = `.SH FILES
.TP
.I /etc/perimeter/perimeter.yaml
Settings of the daemon (default of
.BR \-\-config ):
YAML whose keys are the option names above. A bad file is refused at start
with
.IR FILE : LINE : " KEY" : " reason" .
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
.TP
.B SIGHUP
Reload: the daemon reads its configuration file again and applies the keys
a reload can change; it logs every other changed key as needing a restart.
A bad file is logged and the running settings stay. The systemd unit sends
it on
.BR "systemctl reload" .
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
