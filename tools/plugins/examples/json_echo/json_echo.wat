;; json_echo: read all of stdin (the JSON arguments) and write {"echo":<stdin>} to stdout.
;; Memory layout: 0..8 iovec, 8..12 byte count, 16..24 "{\"echo\":", 24..26 "}\n",
;; 1024..66560 input buffer (inputs over 64 KiB are cut short).
(module
  (import "wasi_snapshot_preview1" "fd_read"
    (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 16) "{\"echo\":")
  (data (i32.const 24) "}\n")

  (func $write (param $ptr i32) (param $len i32)
    (i32.store (i32.const 0) (local.get $ptr))
    (i32.store (i32.const 4) (local.get $len))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))

  (func (export "_start")
    (local $total i32)
    (local $n i32)
    (block $done
      (loop $read
        (i32.store (i32.const 0) (i32.add (i32.const 1024) (local.get $total)))
        (i32.store (i32.const 4) (i32.sub (i32.const 65536) (local.get $total)))
        (br_if $done
          (i32.ne (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8))
                  (i32.const 0)))
        (local.set $n (i32.load (i32.const 8)))
        (br_if $done (i32.eqz (local.get $n)))
        (local.set $total (i32.add (local.get $total) (local.get $n)))
        (br_if $read (i32.lt_u (local.get $total) (i32.const 65536)))))
    (call $write (i32.const 16) (i32.const 8))
    (call $write (i32.const 1024) (local.get $total))
    (call $write (i32.const 24) (i32.const 2))))
