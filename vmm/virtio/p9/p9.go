package p9

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"time"

	"sandfs/vmm/bus"
	"sandfs/vmm/virtio"
)

// FMountTag is VIRTIO_9P_MOUNT_TAG: the configuration space holds the
// mount tag (tag_len le16, then tag_len bytes).
const FMountTag = 0

// DefaultMaxMsg bounds a frame either way unless Config.MaxMsg says
// otherwise; Linux's virtio transport lowers msize to 500 KiB.
const DefaultMaxMsg = 1 << 20

// MaxTagLen bounds the mount tag.
const MaxTagLen = 255

const (
	sendBuf     = 2 << 20
	queueSize   = 128
	dialTimeout = 5 * time.Second
)

// Config configures a device.
type Config struct {
	Tag    string // mount tag, 1 to MaxTagLen bytes
	Socket string // unix socket of the 9P server, dialed at each Tversion
	MaxMsg uint32 // bound on a frame either way; 0: DefaultMaxMsg
	// Dial replaces the dial of Socket (tests).
	Dial func(ctx context.Context) (net.Conn, error)
}

// Device is a virtio-9p transport device.
type Device struct {
	t       *virtio.Transport
	cfg     Config
	cfgArea []byte // configuration space: tag_len, tag
	kick    virtio.Kick
	run     virtio.Runner
	readers sync.WaitGroup // one reader per session

	// sendMu orders the requests on the socket: held while chains are
	// popped and their requests written, by the vCPU thread (sendNow)
	// or the device goroutine. Lock order: sendMu → Transport.work → mu.
	sendMu sync.Mutex
	later  later // guarded by sendMu

	mu        sync.Mutex             // guards the fields below and every push to the queue
	conn      net.Conn               // the session's socket; nil before the dial and outside a session
	open      bool                   // a session is open (a Tversion came; its dial may be under way)
	gen       uint64                 // session number: each Tversion and each reset bump it
	ordered   bool                   // the session's server finishes each clunk before the next request (clunk.go)
	attrs     *walkAttrs             // the last lookup's attributes, until the guest's next request (walkattr.go)
	xattrFids map[uint32]bool        // fids of the session's Txattrcreates, not clunked yet (clunk.go)
	files     map[uint32]*passedFile // the session's open fids whose descriptor the server passed (passfile.go)
	pending   map[uint16]*request
	held      []Held // chains in flight at the Save, answered at Activate (set by Restore)

	stats stats // where a request's time goes in the VMM (DebugState)
}

// request is a chain whose request went to the server, waiting for the
// reply with its tag, or a clunk the device answered itself (c nil).
type request struct {
	c       *virtio.Chain
	gen     uint64
	oldTag  int    // a Tflush's oldtag, -1 for other requests
	lookup  uint32 // a Twalk sent as Twalkgetattr: its new fid (walkattr.go)
	attrs   bool   // it was
	opens   bool   // a Tlopen or Tlcreate, of fid openFid (passfile.go)
	openFid uint32
	popped  time.Time // when the device took the chain
}

var (
	_ virtio.Device      = (*Device)(nil)
	_ virtio.DebugStater = (*Device)(nil)
)

// New returns a virtio-9p device whose interrupt is line.
func New(mem bus.Memory, irq bus.IRQ, line uint32, cfg Config) (*Device, error) {
	if len(cfg.Tag) == 0 || len(cfg.Tag) > MaxTagLen {
		return nil, fmt.Errorf("virtio-9p: mount tag %q: want 1 to %d bytes", cfg.Tag, MaxTagLen)
	}
	if cfg.MaxMsg == 0 {
		cfg.MaxMsg = DefaultMaxMsg
	}
	if cfg.MaxMsg < rlerrorLen {
		return nil, fmt.Errorf("virtio-9p: max message %d is below %d", cfg.MaxMsg, rlerrorLen)
	}
	if cfg.Dial == nil {
		sock := cfg.Socket
		cfg.Dial = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", sock)
			if err == nil {
				// A large Twrite in one socket write (best effort,
				// capped by net.core.wmem_max).
				c.(*net.UnixConn).SetWriteBuffer(sendBuf)
			}
			return c, err
		}
	}
	d := &Device{cfg: cfg, kick: virtio.NewKick(), pending: map[uint16]*request{}, xattrFids: map[uint32]bool{}, files: map[uint32]*passedFile{}}
	d.cfgArea = binary.LittleEndian.AppendUint16(nil, uint16(len(cfg.Tag)))
	d.cfgArea = append(d.cfgArea, cfg.Tag...)
	d.t = virtio.NewTransport(d, mem, irq, line)
	return d, nil
}

// Transport is the device's virtio-mmio window (a bus.MMIODevice).
func (d *Device) Transport() *virtio.Transport { return d.t }

// ID implements virtio.Device.ID.
func (d *Device) ID() uint32 { return virtio.ID9P }

// Features implements virtio.Device.Features.
func (d *Device) Features() uint64 { return virtio.Bit(FMountTag) }

// QueueMax implements virtio.Device.QueueMax: one request queue.
func (d *Device) QueueMax() []uint16 { return []uint16{queueSize} }

// ReadConfig implements virtio.Device.ReadConfig: tag_len, tag; zeros
// past them.
func (d *Device) ReadConfig(off uint64, data []byte) {
	clear(data)
	if off < uint64(len(d.cfgArea)) {
		copy(data, d.cfgArea[off:])
	}
}

// WriteConfig implements virtio.Device.WriteConfig (read-only space).
func (d *Device) WriteConfig(off uint64, data []byte) {}

// Notify implements virtio.Device.Notify.
// The vCPU thread sends small requests itself when it can (sendNow,
// inline.go); else the device goroutine is kicked.
func (d *Device) Notify(int) {
	d.stats.notified()
	if !d.sendNow() {
		d.kick.Kick()
	}
}

// Activate implements virtio.Device.Activate: chains held across a
// restore are answered, then the device goroutine starts.
func (d *Device) Activate(t *virtio.Transport) error {
	q := t.Queue(0)
	d.mu.Lock()
	held := d.held
	d.held = nil
	for _, h := range held {
		c, err := q.Rewalk(h.Head)
		if err != nil {
			d.mu.Unlock()
			return fmt.Errorf("virtio-9p: chain held at the save: %w", err)
		}
		d.writeLocked(q, c, rlerror(h.Tag, eio))
	}
	t.SignalUsed(q)
	d.mu.Unlock()
	d.run.Go(func(stop <-chan struct{}) { d.loop(stop, q) })
	return nil
}

// Reset implements virtio.Device.Reset: the session ends and the chains
// in flight are forgotten (the driver reset them).
func (d *Device) Reset() {
	d.mu.Lock()
	d.gen++
	d.open, d.ordered, d.attrs = false, false, nil
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
	d.pending = map[uint16]*request{}
	clear(d.xattrFids)
	d.dropFilesLocked()
	d.held = nil
	d.mu.Unlock()
	d.run.Stop()
	d.readers.Wait()
	d.sendMu.Lock()
	d.later = later{}
	d.sendMu.Unlock()
}

// Close stops the device.
func (d *Device) Close() error {
	d.t.Close()
	return nil
}

// loop is the device goroutine: on each kick it writes what sendNow
// left, then takes the available chains (under the pause gate) and
// sends their requests (outside it), all under sendMu.
func (d *Device) loop(stop <-chan struct{}, q *virtio.Queue) {
	for {
		d.sendMu.Lock()
		d.flushLater()
		if !d.t.Begin() {
			d.sendMu.Unlock()
			return
		}
		items, ok := d.take(q)
		d.t.End()
		if ok {
			d.send(items)
		}
		d.sendMu.Unlock()
		if !ok {
			return
		}
		select {
		case <-stop:
			return
		case <-d.kick:
		}
	}
}
