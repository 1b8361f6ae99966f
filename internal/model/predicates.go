package model

import (
	"maps"
	"slices"
)

// The predicates below are the model's own rules for values that end up in
// haproxy.cfg, exported so the driver's defence-in-depth checks apply the
// same rule rather than a copy that could drift from it.

// ValidCookieName reports whether s is a cookie-persistence cookie name.
func ValidCookieName(s string) bool {
	_, err := cookieNameParser().parse(s)
	return err == nil
}

// ValidHeaderName reports whether s is a header name the model accepts
// (src-ip-header, hdr() of load-balance).
func ValidHeaderName(s string) bool {
	return validHeaderName(s) == nil
}

// ValidRealm reports whether s is an auth-realm: literal inside double
// quotes in haproxy.cfg and in the WWW-Authenticate header.
func ValidRealm(s string) bool {
	_, err := realmParser().parse(s)
	return err == nil
}

// ValidUser reports whether name and hash make a basic-auth user the model
// accepts from an auth-secret (a crypt(3) hash of bounded cost).
func ValidUser(name, hash string) bool {
	return checkUser(name, hash) == nil
}

// IsSendProxyKeyword reports whether s is a server keyword that
// send-proxy-protocol gives.
func IsSendProxyKeyword(s string) bool {
	return slices.Contains(slices.Collect(maps.Values(sendProxyKeywords)), s)
}

// IsHTTPCheckMethod reports whether s is a method check-http may use.
func IsHTTPCheckMethod(s string) bool {
	return slices.Contains(httpCheckMethods, s)
}

// ValidHTTPCheckVersion reports whether version and host are the HTTP
// version and Host header of a check-http value the model accepts.
func ValidHTTPCheckVersion(version, host string) bool {
	switch {
	case version == "" && host == "":
		return true
	case version != "HTTP/1.0" && version != "HTTP/1.1":
		return false
	case host == "":
		return true
	}
	v, h, err := httpCheckVersion(version + "\r\nHost: " + host)
	return err == nil && v == version && h == host
}
