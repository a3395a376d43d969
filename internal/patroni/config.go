package patroni

// config is a member's Patroni configuration (Patroni's YAML, written as
// JSON, which YAML includes). Only the keys Start sets; see Patroni's
// documentation, "YAML Configuration Settings".
type config struct {
	Scope      string            `json:"scope"`
	Name       string            `json:"name"`
	RESTAPI    listenPair        `json:"restapi"`
	Etcd3      etcd3             `json:"etcd3"`
	Bootstrap  bootstrap         `json:"bootstrap"`
	PostgreSQL memberPostgres    `json:"postgresql"`
	Watchdog   map[string]string `json:"watchdog"`
}

type listenPair struct {
	Listen         string `json:"listen"`
	ConnectAddress string `json:"connect_address"`
}

type etcd3 struct {
	// Hosts is host:port,host:port,... of the etcd members.
	Hosts string `json:"hosts"`
}

// bootstrap is what the first member writes into the DCS (dcs: the
// cluster-wide settings every member follows) and how it runs initdb.
type bootstrap struct {
	DCS    dcs   `json:"dcs"`
	InitDB []any `json:"initdb"`
}

type dcs struct {
	TTL                  int         `json:"ttl"`
	LoopWait             int         `json:"loop_wait"`
	RetryTimeout         int         `json:"retry_timeout"`
	MaximumLagOnFailover int         `json:"maximum_lag_on_failover"`
	SynchronousMode      bool        `json:"synchronous_mode"`
	PostgreSQL           dcsPostgres `json:"postgresql"`
}

type dcsPostgres struct {
	UsePgRewind bool           `json:"use_pg_rewind"`
	UseSlots    bool           `json:"use_slots"`
	Parameters  map[string]any `json:"parameters"`
}

// memberPostgres is the member's own PostgreSQL section.
type memberPostgres struct {
	Listen         string          `json:"listen"`
	ConnectAddress string          `json:"connect_address"`
	DataDir        string          `json:"data_dir"`
	BinDir         string          `json:"bin_dir"`
	PgPass         string          `json:"pgpass"`
	Authentication map[string]auth `json:"authentication"`
	PgHBA          []string        `json:"pg_hba"`
	Parameters     map[string]any  `json:"parameters"`
}

type auth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}
