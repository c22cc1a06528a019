package vsock

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
)

// The host side: host → guest connections start on the listener
// (acceptLoop, hostConnect); guest → host ones are dialed to
// "<uds>_<port>" (dial). Once established, a connection's reader moves
// unix data into conn.rx and its writer moves conn.out to the socket.

// acceptLoop accepts host clients on "<uds>" until the listener closes.
func (d *Device) acceptLoop() {
	defer close(d.lnDone)
	for {
		uc, err := d.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			slog.Warn("vsock: accept", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go d.hostConnect(uc)
	}
}

// hostConnect reads "CONNECT <port>\n" and asks the guest.
func (d *Device) hostConnect(uc *net.UnixConn) {
	uc.SetReadDeadline(time.Now().Add(connectTimeout))
	port, err := readConnect(uc)
	uc.SetReadDeadline(time.Time{})
	if err != nil {
		slog.Debug("vsock: bad host connect", "err", err)
		uc.Close()
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || len(d.conns) >= maxConns {
		uc.Close()
		return
	}
	local := d.nextPort
	for {
		if _, used := d.conns[key{local, port}]; !used {
			break
		}
		local++
	}
	d.nextPort = local + 1
	if d.nextPort < firstLocalPort {
		d.nextPort = firstLocalPort
	}
	c := d.newConnLocked(key{local: local, peer: port}, uc, stConnecting)
	d.queueCtrlLocked(c.key, opRequest, 0)
}

// readConnect reads the "CONNECT <port>\n" line byte by byte, so that
// no data after it is consumed.
func readConnect(r io.Reader) (port uint32, err error) {
	var line []byte
	b := make([]byte, 1)
	for {
		if _, err := io.ReadFull(r, b); err != nil {
			return 0, fmt.Errorf("vsock: read connect line: %w", err)
		}
		if b[0] == '\n' {
			break
		}
		if line = append(line, b[0]); len(line) > 64 {
			return 0, fmt.Errorf("vsock: connect line too long")
		}
	}
	f := strings.Fields(string(line))
	if len(f) != 2 || f[0] != "CONNECT" {
		return 0, fmt.Errorf("vsock: bad connect line %q", strings.TrimSpace(string(line)))
	}
	p, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil {
		return 0, fmt.Errorf("vsock: bad port %q", f[1])
	}
	return uint32(p), nil
}

// dial connects a guest REQUEST to <uds>_<port>.
func (d *Device) dial(c *conn) {
	path := d.uds + "_" + strconv.FormatUint(uint64(c.local), 10)
	uc, err := net.DialTimeout("unix", path, 2*time.Second)
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.state != stDialing { // dropped meanwhile
		if err == nil {
			uc.Close()
		}
		return
	}
	if err != nil {
		slog.Debug("vsock: guest connect refused", "port", c.local, "err", err)
		d.dropLocked(c, true)
		return
	}
	c.uc = uc.(*net.UnixConn)
	c.state = stEstablished
	d.queueCtrlLocked(c.key, opResponse, 0)
	d.startLocked(c)
}

// confirm tells a host client its connection is accepted.
func (d *Device) confirm(c *conn) {
	_, err := fmt.Fprintf(c.uc, "OK %d\n", c.local)
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.state != stEstablished {
		return
	}
	if err != nil {
		d.dropLocked(c, true)
		return
	}
	d.startLocked(c)
}

// startLocked starts an established connection's reader and writer.
func (d *Device) startLocked(c *conn) {
	go d.reader(c)
	go d.writer(c)
}

// reader moves host data into c.rx, staying at most rxHigh ahead.
func (d *Device) reader(c *conn) {
	buf := make([]byte, rxHigh)
	for {
		d.mu.Lock()
		for c.state == stEstablished && !c.guestNoRecv && len(c.rx) >= rxHigh {
			c.cond.Wait()
		}
		if c.state != stEstablished || c.guestNoRecv {
			d.mu.Unlock()
			return
		}
		room := rxHigh - len(c.rx)
		d.mu.Unlock()
		n, err := c.uc.Read(buf[:room])
		d.mu.Lock()
		if c.state != stEstablished {
			d.mu.Unlock()
			return
		}
		if n > 0 && !c.guestNoRecv {
			c.rx = append(c.rx, buf[:n]...)
			d.rxKick.Kick()
		}
		if err != nil {
			c.hostEOF = true
			d.rxKick.Kick()
			d.maybeFinishLocked(c)
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
	}
}

// writer moves guest data from c.out to the unix socket and returns credit.
func (d *Device) writer(c *conn) {
	for {
		d.mu.Lock()
		for c.state == stEstablished && len(c.out) == 0 && !(c.guestNoSend && !c.wroteShutWr) {
			c.cond.Wait()
		}
		if c.state != stEstablished {
			d.mu.Unlock()
			return
		}
		if len(c.out) == 0 { // guest shut down sending, all written
			c.wroteShutWr = true
			d.mu.Unlock()
			c.uc.CloseWrite()
			d.mu.Lock()
			d.maybeFinishLocked(c)
			d.mu.Unlock()
			return
		}
		data := c.out
		c.out = nil
		c.pendingWrite = len(data)
		d.mu.Unlock()
		n, err := c.uc.Write(data)
		d.mu.Lock()
		c.pendingWrite = 0
		if c.state != stEstablished {
			d.mu.Unlock()
			return
		}
		c.fwdCnt += uint32(n)
		if err != nil {
			slog.Info("vsock: host socket write failed; connection reset", "port", c.local, "peer", c.peer, "err", err)
			d.dropLocked(c, true)
			d.mu.Unlock()
			return
		}
		if needCreditUpdate(c.fwdCnt - c.lastFwdSent) {
			d.queueCreditUpdateLocked(c)
		}
		d.mu.Unlock()
	}
}
