# Ruby's dalli (Debian ruby-dalli 3.0.6: the binary protocol): the scripted scenario.
# Usage: ruby scenario.rb HOST:PORT
# Prints one line per step of what the user sees (see ../common.py for the line format).
require 'dalli'
require 'digest'

$stdout.sync = true
Dalli.logger.level = Logger::FATAL

def show(v)
  case v
  when String
    return format('<%d bytes sha1 %s>', v.bytesize, Digest::SHA1.hexdigest(v)[0, 12]) if v.bytesize > 64
    v.inspect
  when Hash
    '{' + v.sort_by { |k, _| k.to_s }.map { |k, x| "#{k}: #{show(x)}" }.join(', ') + '}'
  else
    v.inspect
  end
end

def step(name)
  r = yield
  puts "#{name}: #{show(r)}"
  r
rescue StandardError => e
  puts "#{name}: error #{e.class}: #{e.message.gsub(/\d+\.\d+\.\d+\.\d+:\d+/, 'HOST')}"
  nil
end

c = Dalli::Client.new(ARGV[0], socket_timeout: 5, socket_max_failures: 1, down_retry_delay: 0, compress: false)
raw = { raw: true }
big = (0...500 * 1024).map { |i| ((i * 31 + 7) % 251).chr }.join.b

step('basic flush') { c.flush }
step('basic miss') { c.get('miss') }
step('basic set') { !!c.set('k1', 'v1') }
step('basic get') { c.get('k1') }
step('basic add-existing') { c.add('k1', 'x') }
step('basic add-new') { !!c.add('k2', 'v2') }
step('basic replace-missing') { c.replace('nope', 'x') }
step('basic replace') { !!c.replace('k2', 'v2r') }
step('basic multi-get') { c.get_multi('k1', 'k2', 'miss') }
step('basic set-object') { !!c.set('obj', { 'a' => [1, 2] }) }
step('basic get-object') { c.get('obj') }
step('basic fetch-miss') { c.fetch('fetched') { 'computed' } }
step('basic fetch-hit') { c.fetch('fetched') { 'again' } }

step('cas ok') { !!c.cas('k1') { |v| v + 'b' } }
step('cas missing') { c.cas('nocas') { |v| v } }
step('cas get') { c.get('k1') }
value, token = c.get_cas('k1')
step('cas get-cas') { value }
step('cas set-cas-ok') { !!c.set_cas('k1', 'v1c', token) }
step('cas set-cas-stale') { c.set_cas('k1', 'v1d', token) }

step('counter set') { !!c.set('n', '10', 0, raw) }
step('counter incr') { c.incr('n', 5) }
step('counter decr') { c.decr('n', 20) }
step('counter missing') { c.incr('nonum', 1) }
step('counter missing-initial') { c.incr('ctr', 1, nil, 7) }
step('counter after-initial') { c.incr('ctr', 1, nil, 7) }

step('concat set') { !!c.set('cc', 'v', 0, raw) }
step('concat append') { c.append('cc', '+a') }
step('concat prepend') { c.prepend('cc', 'p-') }
step('concat get') { c.get('cc', raw) }
step('concat append-missing') { c.append('nope', 'x') }

step('touch existing') { c.touch('k2', 100) }
step('touch missing') { c.touch('nope', 100) }
step('touch gat') { c.gat('k2', 200) }

step('delete existing') { c.delete('k1') }
step('delete again') { c.delete('k1') }
step('delete get') { c.get('k1') }

step('large set') { !!c.set('big', big, 0, raw) }
step('large get') { c.get('big', raw) }
step('large multi-get') { c.get_multi('big', 'k2') }
step('large too-big') { c.set('huge', 'x' * (2 * 1024 * 1024), 0, raw) }
step('misc version') { c.version.values.map { |v| v.to_s.match?(/\A\d+\.\d+\.\d+/) } }
step('misc stats') { c.stats.values.map { |s| s.slice('curr_items', 'get_hits', 'get_misses', 'cmd_set') } }
step('misc alive') { c.alive! && true }
c.close
