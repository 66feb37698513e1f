import { InvalidArgumentError, type Command } from 'commander';
import type { CliConfig } from '../config.ts';

/** Wraps a command action: resolves the configuration and hands over the command's own options and arguments. */
// Commander hands over positional arguments untyped; each action names their types.
export type Runner = <O>(action: (config: CliConfig, opts: O, ...args: any[]) => Promise<void>) => (...args: unknown[]) => Promise<void>;

export function integerAtLeast(min: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min) throw new InvalidArgumentError(`not an integer >= ${min}: ${value}`);
    return n;
  };
}

export function list(value: string): string[] {
  return value.split(',').map((s) => s.trim()).filter(Boolean);
}

export type { Command };

export const positiveInt = integerAtLeast(1);
