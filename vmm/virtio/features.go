package virtio

// Transport-level feature bits (virtio 1.x §6, include/uapi/linux/virtio_config.h).
const (
	FRingIndirectDesc = 28 // VIRTIO_RING_F_INDIRECT_DESC
	FRingEventIdx     = 29 // VIRTIO_RING_F_EVENT_IDX
	FVersion1         = 32 // VIRTIO_F_VERSION_1
	FAccessPlatform   = 33 // VIRTIO_F_ACCESS_PLATFORM
	FRingPacked       = 34 // VIRTIO_F_RING_PACKED
)

// Device status bits (§2.1, VIRTIO_CONFIG_S_*).
const (
	StatusAcknowledge      = 1
	StatusDriver           = 2
	StatusDriverOK         = 4
	StatusFeaturesOK       = 8
	StatusDeviceNeedsReset = 64
	StatusFailed           = 128
)

// InterruptStatus bits (§4.2.2).
const (
	IntUsedBuffer   = 1 // VIRTIO_MMIO_INT_VRING
	IntConfigChange = 2 // VIRTIO_MMIO_INT_CONFIG
)

// Device IDs (§5).
const (
	IDNet   = 1
	IDBlock = 2
	IDRNG   = 4
	ID9P    = 9 // VIRTIO_ID_9P
	IDVsock = 19
)

// Bit returns the feature mask for bit number n.
func Bit(n uint) uint64 { return 1 << n }
