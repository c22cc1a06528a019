package boot

import (
	"encoding/binary"
	"errors"
	"testing"
)

// fakeBzImage builds the smallest image ParseBzImage accepts: 4 setup
// sectors (setup_sects = 0 means 4), a 2.15 header, then code.
func fakeBzImage(code []byte) []byte {
	img := make([]byte, 5*512+len(code))
	img[hdrStart] = 0
	binary.LittleEndian.PutUint16(img[hdrBootFlag:], 0xaa55)
	img[hdrJump] = 0xeb
	img[hdrJump+1] = 0x6a // header ends at 0x26c
	copy(img[hdrMagic:], "HdrS")
	binary.LittleEndian.PutUint16(img[hdrVersion:], 0x020f)
	img[hdrLoadflags] = loadedHigh
	binary.LittleEndian.PutUint32(img[hdrInitrdAddrMax:], 0x7fffffff)
	binary.LittleEndian.PutUint16(img[hdrXLoadflags:], xlfKernel64)
	binary.LittleEndian.PutUint32(img[hdrCmdlineSize:], 2047)
	binary.LittleEndian.PutUint32(img[hdrInitSize:], 0x400000)
	copy(img[5*512:], code)
	return img
}

func TestParseBzImage(t *testing.T) {
	k, err := ParseBzImage(fakeBzImage([]byte("KERNEL")))
	if err != nil {
		t.Fatal(err)
	}
	if string(k.Code) != "KERNEL" || k.Version != 0x020f || k.CmdMax != 2047 || len(k.Header) != 0x26c-hdrStart {
		t.Errorf("ParseBzImage = code %q version %#x cmdmax %d header %d", k.Code, k.Version, k.CmdMax, len(k.Header))
	}
	if _, err := ParseBzImage(make([]byte, 8192)); !errors.Is(err, ErrNotBzImage) {
		t.Errorf("ParseBzImage(zeroes) = %v; want ErrNotBzImage", err)
	}
	old := fakeBzImage(nil)
	binary.LittleEndian.PutUint16(old[hdrXLoadflags:], 0)
	if _, err := ParseBzImage(old); err == nil {
		t.Errorf("ParseBzImage(no XLF_KERNEL_64) = nil error")
	}
}

func TestLoad(t *testing.T) {
	const mem = 64 << 20
	ram := make([]byte, mem)
	k, _ := ParseBzImage(fakeBzImage([]byte("KERNEL")))
	initrd := []byte("INITRD-CONTENT")
	p, err := Load(ram, mem, k, initrd, "console=ttyS0 quiet")
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	zp := ram[ZeroPageAddr:]
	if p.Entry != 0x100200 || string(ram[KernelAddr:KernelAddr+6]) != "KERNEL" {
		t.Errorf("entry %#x, kernel at 1 MiB %q", p.Entry, ram[KernelAddr:KernelAddr+6])
	}
	if zp[hdrTypeOfLoader] != 0xff || zp[hdrLoadflags]&(loadedHigh|canUseHeap) != loadedHigh|canUseHeap {
		t.Errorf("type_of_loader %#x loadflags %#x", zp[hdrTypeOfLoader], zp[hdrLoadflags])
	}
	if string(zp[hdrMagic:hdrMagic+4]) != "HdrS" {
		t.Errorf("setup header not copied")
	}
	if got := le.Uint32(zp[hdrCmdLinePtr:]); got != CmdlineAddr {
		t.Errorf("cmd_line_ptr = %#x", got)
	}
	if got := string(ram[CmdlineAddr : CmdlineAddr+20]); got != "console=ttyS0 quiet\x00" {
		t.Errorf("cmdline = %q", got)
	}
	ia, is := le.Uint32(zp[hdrRamdiskImage:]), le.Uint32(zp[hdrRamdiskSize:])
	if is != uint32(len(initrd)) || ia%4096 != 0 || uint64(ia)+uint64(is) > mem || string(ram[ia:ia+is]) != string(initrd) {
		t.Errorf("initrd at %#x size %d", ia, is)
	}
	want := []E820Entry{{0, 0x9fc00, E820RAM}, {0x9fc00, 0x400, E820Reserved}, {0x100000, mem - 0x100000, E820RAM}}
	if n := int(zp[bpE820Entries]); n != len(want) {
		t.Fatalf("e820_entries = %d; want %d", n, len(want))
	}
	for i, w := range want {
		b := zp[bpE820Table+20*i:]
		got := E820Entry{le.Uint64(b), le.Uint64(b[8:]), le.Uint32(b[16:])}
		if got != w {
			t.Errorf("e820[%d] = %+v; want %+v", i, got, w)
		}
	}
	// Page tables: 2 MiB page for 3 GiB + 4 MiB maps itself.
	gpa := uint64(3<<30 | 4<<20)
	pdpte := le.Uint64(ram[PDPTAddr+8*(gpa>>30):])
	pde := le.Uint64(ram[(pdpte&^0xfff)+8*((gpa>>21)&511):])
	if pde&^0xfff != gpa || pde&ptePS == 0 {
		t.Errorf("PDE for %#x = %#x", gpa, pde)
	}
	if got := le.Uint64(ram[GDTAddr+SelectorCode:]); got != 0x00af9b000000ffff {
		t.Errorf("GDT code = %#x", got)
	}
	if got := le.Uint64(ram[GDTAddr+SelectorData:]); got != 0x00cf93000000ffff {
		t.Errorf("GDT data = %#x", got)
	}
}

func TestLoadErrors(t *testing.T) {
	k, _ := ParseBzImage(fakeBzImage([]byte("x")))
	if _, err := Load(make([]byte, 2<<20), 2<<20, k, nil, ""); err == nil {
		t.Errorf("Load(2 MiB RAM, init_size 4 MiB) = nil error")
	}
	long := make([]byte, 3000)
	for i := range long {
		long[i] = 'a'
	}
	if _, err := Load(make([]byte, 64<<20), 64<<20, k, nil, string(long)); err == nil {
		t.Errorf("Load(3000-byte cmdline) = nil error")
	}
}

func TestE820HighRAM(t *testing.T) {
	es := E820(4 << 30)
	last := es[len(es)-1]
	if last.Addr != HighRAMStart || last.Size != 4<<30-MMIOHoleStart {
		t.Errorf("E820(4 GiB) last = %+v", last)
	}
	if r := RAMLayout(4 << 30); len(r) != 2 || r[1].Offset != MMIOHoleStart {
		t.Errorf("RAMLayout(4 GiB) = %+v", r)
	}
}

func TestMPTable(t *testing.T) {
	ram := make([]byte, 1<<20)
	for _, cpus := range []int{1, 2, MaxCPUs} {
		if err := WriteMPTable(ram, cpus); err != nil {
			t.Fatal(err)
		}
		if MPTableAddr+MPTableSize(cpus) > 0xa0000 {
			t.Errorf("MP table for %d CPUs ends at %#x, past 640 KiB", cpus, MPTableAddr+MPTableSize(cpus))
		}
		fp := ram[MPTableAddr : MPTableAddr+16]
		if string(fp[:4]) != "_MP_" || checksum(fp) != 0 {
			t.Errorf("%d cpus: floating pointer %q checksum %d", cpus, fp[:4], checksum(fp))
		}
		tb := ram[MPTableAddr+16 : MPTableAddr+MPTableSize(cpus)]
		if string(tb[:4]) != "PCMP" || checksum(tb) != 0 || int(binary.LittleEndian.Uint16(tb[4:])) != len(tb) {
			t.Errorf("%d cpus: table %q checksum %d", cpus, tb[:4], checksum(tb))
		}
		procs := 0
		for off := mpHeaderSize; off < len(tb); {
			switch tb[off] {
			case mpProc:
				procs++
				off += mpProcSize
			default:
				off += mpEntrySize
			}
		}
		if procs != cpus {
			t.Errorf("%d cpus: %d processor entries", cpus, procs)
		}
	}
	if err := WriteMPTable(ram, 0); err == nil {
		t.Errorf("WriteMPTable(0 cpus) = nil error")
	}
}

func TestCmdline(t *testing.T) {
	var c Cmdline
	c.Add(BaseCmdline, "  ", "quiet")
	c.AddVirtioMMIO(VirtioMMIOBase, VirtioMMIOSize, 5)
	c.AddVirtioMMIO(VirtioMMIOBase+VirtioMMIOSize, 0x200, 6)
	want := BaseCmdline + " quiet virtio_mmio.device=4K@0xd0000000:5 virtio_mmio.device=0x200@0xd0001000:6"
	if got := c.String(); got != want {
		t.Errorf("Cmdline = %q; want %q", got, want)
	}
}
