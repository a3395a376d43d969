// Package web is metalloc's shared HTTP plumbing for its OpenStack-compatible
// APIs: request ids (X-OpenStack-Request-Id), structured access logs, the
// Ironic microversion negotiation (X-OpenStack-Ironic-API-Version) and Ironic's
// error body, pagination parameters and `next` links, and mapping of storage
// errors to status codes. Domain packages (node, allocation, ...) register
// their handlers on an *echo.Echo built by NewIronicServer and return *Error
// values for every client-visible failure.
package web
