// The one error catalogue. Every error leaves the platform as application/problem+json
// {type,title,status,detail,instance,requestId}; `type` ends in the entry's stable code.

export const problems = {
  'bad-request': { status: 400, title: 'Bad Request' },
  'validation-failed': { status: 400, title: 'Validation Failed' },
  'quota-exceeded': { status: 400, title: 'Quota Exceeded' },
  unauthorized: { status: 401, title: 'Unauthorized' },
  forbidden: { status: 403, title: 'Forbidden' },
  'not-found': { status: 404, title: 'Not Found' },
  'method-not-allowed': { status: 405, title: 'Method Not Allowed' },
  'request-timeout': { status: 408, title: 'Request Timeout' },
  conflict: { status: 409, title: 'Conflict' },
  'payload-too-large': { status: 413, title: 'Payload Too Large' },
  'unsupported-media-type': { status: 415, title: 'Unsupported Media Type' },
  'too-many-requests': { status: 429, title: 'Too Many Requests' },
  'request-header-fields-too-large': { status: 431, title: 'Request Header Fields Too Large' },
  internal: { status: 500, title: 'Internal Server Error' },
  'bad-gateway': { status: 502, title: 'Bad Gateway' },
  'service-unavailable': { status: 503, title: 'Service Unavailable' },
  'gateway-timeout': { status: 504, title: 'Gateway Timeout' },
} as const;

export type ProblemCode = keyof typeof problems;

export const PROBLEM_TYPE_PREFIX = 'urn:svc:problem-details:';
export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

export interface InvalidField {
  field: string;
  message: string;
}

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail: string;
  instance: string;
  requestId: string;
  errors?: InvalidField[];
}

/** An expected failure with a catalogue code; services throw it, the HTTP layer renders it. */
export class Problem extends Error {
  readonly code: ProblemCode;
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly errors?: InvalidField[];

  constructor(code: ProblemCode, detail: string, options: { headers?: Record<string, string>; errors?: InvalidField[] } = {}) {
    super(detail);
    this.code = code;
    this.status = problems[code].status;
    this.headers = options.headers ?? {};
    this.errors = options.errors;
  }

  toBody(instance: string, requestId: string): ProblemBody {
    return {
      type: PROBLEM_TYPE_PREFIX + this.code,
      title: problems[this.code].title,
      status: this.status,
      detail: this.message,
      instance,
      requestId,
      ...(this.errors ? { errors: this.errors } : {}),
    };
  }
}

export const notFound = (detail: string) => new Problem('not-found', detail);
export const conflict = (detail: string) => new Problem('conflict', detail);
export const badRequest = (detail: string) => new Problem('bad-request', detail);
export const forbidden = (detail: string) => new Problem('forbidden', detail);
export const unauthorized = (detail: string) =>
  new Problem('unauthorized', detail, { headers: { 'www-authenticate': 'Bearer' } });

/** The most errors one 400 lists: a body of 100,000 bad items must not get a response of megabytes. */
export const MAX_LISTED_ERRORS = 20;

/** A 400 naming each field at fault (the first MAX_LISTED_ERRORS, then how many there were), in the detail and in `errors`. */
export function invalid(errors: InvalidField[]): Problem {
  const shown = errors.slice(0, MAX_LISTED_ERRORS);
  const listed = shown.map((error) => `${error.field}: ${error.message}`).join('; ');
  const count = errors.length > shown.length ? ` (${errors.length} errors, the first ${shown.length} listed)` : '';
  return new Problem('validation-failed', `Validation failed${count}: ${listed}`, { errors: shown });
}
