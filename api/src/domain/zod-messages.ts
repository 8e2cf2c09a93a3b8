// Plain words where zod's default messages read like a type checker's: a missing field "is required"
// rather than "Invalid input: expected string, received undefined". Imported once for its effect by the
// modules that turn zod issues into problem details or start-up lines (http/route.ts, config.ts).
import { z } from 'zod';

z.config({
  customError: (issue) => (issue.code === 'invalid_type' && issue.input === undefined ? 'is required' : undefined),
});
