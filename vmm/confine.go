package vmm

// confineSelf applies the in-process part of cfg.Jail.
func confineSelf(cfg *Config) error {
	return nil
}
