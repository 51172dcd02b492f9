// A small progress bar on stderr, so stdout stays clean for what a command prints.
// On a terminal it redraws one line; elsewhere (CI, a log file) it prints one line per step.

export interface Progress {
  /** Sets the sum of the weights of all steps (known only once the work is planned). */
  total(weight: number): void
  /** Starts a named step worth `weight` units of the whole; finishes the previous one. */
  step(label: string, weight: number): void
  /** Fraction (0–1) of the current step that is done. */
  update(fraction: number): void
  /** Finishes the bar. */
  done(): void
}

const WIDTH = 30

export function progressBar(title: string, totalWeight = 1, stream: NodeJS.WriteStream = process.stderr): Progress {
  const started = performance.now()
  const tty = Boolean(stream.isTTY)
  let doneWeight = 0
  let current = { label: '', weight: 0, fraction: 0, started: started }
  let lastDraw = 0

  const elapsed = (from: number) => `${((performance.now() - from) / 1000).toFixed(1)}s`

  function draw(force = false) {
    if (!tty) return
    const now = performance.now()
    if (!force && now - lastDraw < 100) return
    lastDraw = now
    const share = Math.min(1, (doneWeight + current.weight * current.fraction) / totalWeight)
    const filled = Math.round(share * WIDTH)
    const bar = '█'.repeat(filled) + '░'.repeat(WIDTH - filled)
    const line = `${title} ${bar} ${String(Math.floor(share * 100)).padStart(3)}% ${elapsed(started)}  ${current.label}`
    stream.write(`\r\x1b[2K${line.slice(0, (stream.columns || 120) - 1)}`)
  }

  function finishStep() {
    if (!current.label) return
    doneWeight += current.weight
    if (!tty) stream.write(`${title}: ${current.label} (${elapsed(current.started)})\n`)
  }

  return {
    total(weight) {
      totalWeight = Math.max(weight, 1e-9)
    },
    step(label, weight) {
      finishStep()
      current = { label, weight, fraction: 0, started: performance.now() }
      draw(true)
    },
    update(fraction) {
      current.fraction = Math.max(0, Math.min(1, fraction))
      draw()
    },
    done() {
      finishStep()
      current = { label: 'done', weight: 0, fraction: 0, started: performance.now() }
      doneWeight = totalWeight
      draw(true)
      if (tty) stream.write('\n')
    },
  }
}

/** A Progress that prints nothing. */
export const silentProgress: Progress = { total() {}, step() {}, update() {}, done() {} }
