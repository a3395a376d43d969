package backend

import "github.com/metalloc/metalloc/ironic"

// Mirror is the backend's node mirror: the conductors' lease moves in
// front of Ironic (conductor/leases_backend.go) read a node they changed
// in Ironic again through it (Mirror.Refresh), so that metalloc's next
// decision sees the change.
func (b *Ironic) Mirror() *ironic.Mirror { return b.mirror }
