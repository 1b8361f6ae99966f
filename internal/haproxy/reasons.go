package haproxy

// Reload reasons: a fixed vocabulary, so metrics stay bounded whatever the
// objects are called.
const (
	ReloadStart    = "start"    // first configuration of this HAProxy
	ReloadBackends = "backends" // backends added, removed or changed
	ReloadSlots    = "slots"    // a backend needs more server slots
	ReloadGlobal   = "global"   // ConfigMap-level settings
	ReloadFrontend = "frontend" // default backend, error pages, TCP services
	ReloadTLS      = "tls"      // https frontend: default certificate on/off, client CA
	ReloadRecovery = "recovery" // the live HAProxy fell behind the files
)

// ReloadReasons lists every reload reason, for metrics.
var ReloadReasons = []string{ReloadStart, ReloadBackends, ReloadSlots, ReloadGlobal, ReloadFrontend, ReloadTLS, ReloadRecovery}

// Results of a reload or a runtime change, for metrics: the same two words
// for both.
const (
	ResultOK     = "ok"
	ResultFailed = "failed"
)

// Results lists every result, for metrics.
var Results = []string{ResultOK, ResultFailed}

// Kinds of Runtime API commands, for metrics.
const (
	RuntimeServer = "server"
	RuntimeMap    = "map"
	RuntimeCert   = "cert"
)

// RuntimeKinds lists every kind of Runtime API command, for metrics.
var RuntimeKinds = []string{RuntimeServer, RuntimeMap, RuntimeCert}

// ReasonConfigRejected is the problem of a value HAProxy or the driver's
// own checks refused.
const ReasonConfigRejected = "ConfigRejected"
