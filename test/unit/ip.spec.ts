import { normalizeIp } from '../../lib/keys/ip.js';

describe('normalizeIp', () => {
  it.each([
    ['1.2.3.4', '1.2.3.4'],
    ['::ffff:1.2.3.4', '1.2.3.4'],
    ['::FFFF:10.0.0.1', '10.0.0.1'],
    ['::ffff:0102:0304', '1.2.3.4'],
    ['2001:db8:1:2:3:4:5:6', '2001:db8:1:2::/64'],
    ['2001:db8:1:2:ffff:ffff:ffff:ffff', '2001:db8:1:2::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['2001:DB8:0:0:1::', '2001:db8:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['::1', '0:0:0:0::/64'],
    ['64:ff9b::1.2.3.4', '64:ff9b:0:0::/64'],
  ])('%s is keyed as %s', (ip, expected) => {
    expect(normalizeIp(ip)).toBe(expected);
  });

  it.each([undefined, null, '', 'unknown', '1.2.3', '1.2.3.4.5', '::ffff:999.1.1.1', 'x'.repeat(100), 42])(
    'finds no address in %p',
    (value) => {
      expect(normalizeIp(value)).toBeUndefined();
    },
  );

  it('puts a whole /64 in one bucket and separate /64s in separate ones', () => {
    const same = new Set(Array.from({ length: 1000 }, (_, i) => normalizeIp(`2001:db8:aa:bb:${i.toString(16)}::${i.toString(16)}`)));
    expect(same.size).toBe(1);
    const apart = new Set(Array.from({ length: 1000 }, (_, i) => normalizeIp(`2001:db8:aa:${i.toString(16)}::1`)));
    expect(apart.size).toBe(1000);
  });
});
