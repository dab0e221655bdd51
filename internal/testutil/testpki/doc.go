// Package testpki makes throwaway certificate authorities for tests: a CA
// per call to New, and server and client certificates it signs, written as
// PEM files into the test's temporary directory (the form the reserver's
// --tls-* flags and the router's --ledger-* flags take) and returned
// parsed as well.
//
// Keys are ECDSA P-256; certificates are valid from an hour ago for an
// hour, long enough for any test and useless after. Nothing here is fit
// for anything but tests.
package testpki
