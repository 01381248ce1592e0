package host

import "os"

// attemptHostID is the name of this host in the attempt history
// (store.Attempt.Host): its cluster ID when it has one, else its host
// name and listen address, which tell the hosts of one machine apart.
func attemptHostID(cfg Config) string {
	if cfg.HostID != "" {
		return cfg.HostID
	}
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "localhost"
	}
	if cfg.Listen != "" {
		return name + "/" + cfg.Listen
	}
	return name
}
