// Package conductorapi serves the conductors resource of the Ironic API
// (GET /v1/conductors and /v1/conductors/{hostname}, microversion 1.49+)
// from the conductors table. It is apart from package conductor, the
// engine, so that metalloc-api does not link the engine; both decide
// liveness with the one SQL function metalloc_conductor_alive.
package conductorapi
