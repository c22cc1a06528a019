// Package msg is the one message grammar of sandfs's ctl-style files:
// the daemon's /ctl and sandboxes/<id>/ctl (package ctl), the guest
// agent's /ctl and procs/<n>/ctl (package guest), and the VMM's control
// socket (package vmm). It holds
//
//   - the tokenizer (Rules.Split) and Quote, its inverse;
//   - the verb table (Table of Verb rows: name, usage and argument counts,
//     key=value keys, the states the verb needs, documentation, handler),
//     with whole-word verb lookup and the standard errors;
//   - the one error type (Error: errno and text), the one errno mapping
//     (Errno), Cite for quoting input in error texts, and Line/ParseLine
//     to carry an error over a line protocol with its errno.
//
// It imports nothing from sandfs, so the guest agent (which must not pull
// in the control plane), the control plane and the VMM can all use it.
// It lives under ctl/ because STYLE §2 puts the grammar in ctl; package
// ctl re-exports Error and Table under its own names.
//
// # Messages
//
// One message per write (or per line, on the VMM's socket):
//
//	message = [blanks] word {blanks word} [blanks] ["\n"]
//	word    = 1*(char | "'" {char | "''"} "'")   rc(1) quoting: a'b c'd is "ab cd"
//	blanks  = 1*(" " | "\t")
//
// At most one trailing newline; a second line is refused, never guessed
// at. Text rules (the default: ctl, VMM) also want valid UTF-8 and no
// control characters but tab, and at most Max (4 KiB) bytes, well below
// the 9P iounit and go-fuse's MaxWrite so one write(2) is one message.
// Script rules (the guest's procs/<n>/ctl) let a quoted part hold any byte
// but NUL, newlines included, so `exec` can carry a script.
//
// # Errors
//
// Every failure is an *Error whose text has the shape `verb: reason
// "input"` (lower case, no final period, the input quoted by Cite) and
// whose errno is what the transports carry (9P2000.L Rlerror and FUSE
// replies carry nothing else). Malformed messages get the same words in
// every file:
//
//	E2BIG   ctl: message too long (5000 bytes, max 4096)
//	EINVAL  ctl: empty message
//	EINVAL  ctl: unknown verb "bogus"
//	EINVAL  kill: missing argument "kill" (usage: kill <id>)
//	EINVAL  pause: too many arguments "pause now" (usage: pause)
//	EINVAL  ctl: more than one line "a\nb", ctl: unterminated quote "a 'b",
//	        ctl: control character in message "a\x01", ctl: NUL byte in message "a\x00",
//	        ctl: message is not UTF-8 text "\xff", <verb>: unknown key "k=v",
//	        <verb>: repeated key "k=v"
//	EBUSY   pause: sandbox "t1" is paused; need running   (Verb.Refuse)
package msg
