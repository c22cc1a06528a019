package vmm

// Bench is `sandfs vmm bench`.
func Bench(args []string) int { return 2 }
