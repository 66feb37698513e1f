import { describe, expect, it } from 'vitest';
import * as der from './der.ts';

const hex = (b: Buffer) => b.toString('hex');

describe('DER encodings', () => {
  it('lengths: one byte under 128, then 0x81 n, then 0x82 n n', () => {
    expect(hex(der.octetString(Buffer.alloc(127))).slice(0, 4)).toBe('047f');
    expect(hex(der.octetString(Buffer.alloc(128))).slice(0, 6)).toBe('048180');
    expect(hex(der.octetString(Buffer.alloc(255))).slice(0, 6)).toBe('0481ff');
    expect(hex(der.octetString(Buffer.alloc(256))).slice(0, 8)).toBe('04820100');
    expect(() => der.octetString(Buffer.alloc(0x10000))).toThrow(RangeError);
  });

  it('integers are minimal and positive', () => {
    expect(hex(der.smallInteger(2))).toBe('020102');
    expect(hex(der.smallInteger(0))).toBe('020100');
    expect(hex(der.unsignedInteger(Buffer.from('0000017f', 'hex')))).toBe('0202017f');
    expect(hex(der.unsignedInteger(Buffer.from('80', 'hex')))).toBe('02020080');
  });

  it('object identifiers: the first two arcs in one byte, larger arcs in base 128', () => {
    expect(hex(der.objectIdentifier('2.5.4.3'))).toBe('0603550403');
    expect(hex(der.objectIdentifier('1.2.840.10045.4.3.2'))).toBe('06082a8648ce3d040302');
    expect(hex(der.objectIdentifier('1.3.6.1.5.5.7.3.1'))).toBe('06082b06010505070301');
  });

  it('bit strings count their unused bits; booleans, tags and containers', () => {
    expect(hex(der.bitString(Buffer.from([0x06]), 7))).toBe('03020106');
    expect(hex(der.bitString(Buffer.from([0x80]), 1))).toBe('03020780');
    expect(hex(der.bitString(Buffer.from([0xab, 0xcd])))).toBe('030300abcd');
    expect(hex(der.boolean(true))).toBe('0101ff');
    expect(hex(der.boolean(false))).toBe('010100');
    expect(hex(der.explicit(3, der.sequence()))).toBe('a3023000');
    expect(hex(der.implicit(7, Buffer.from([127, 0, 0, 1])))).toBe('87047f000001');
    expect(hex(der.set(der.utf8String('é')))).toBe('31040c02c3a9');
  });

  it('times: UTCTime up to 2049, GeneralizedTime from 2050, to the second', () => {
    expect(der.time(new Date('2049-12-31T23:59:59.999Z')).toString('latin1')).toBe('\x17\x0d491231235959Z');
    expect(der.time(new Date('2050-01-01T00:00:00.000Z')).toString('latin1')).toBe('\x18\x0f20500101000000Z');
  });
});
