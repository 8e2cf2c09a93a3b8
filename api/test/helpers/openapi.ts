// Checks responses against the platform's own /v3/openapi document, so every response any test sees is
// also a check that the document tells the truth.
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';

interface Operation {
  method: string;
  pattern: RegExp;
  literalSegments: number;
  responses: Record<string, { content?: Record<string, { schema?: object }> }>;
}

export interface ResponseValidator {
  /** Returns a list of problems; empty when the body matches the documented schema for its status. */
  check(method: string, path: string, status: number, contentType: string | undefined, body: unknown): string[];
}

export function createResponseValidator(document: any): ResponseValidator {
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
  const compiled = new Map<object, ValidateFunction>();
  const operations: Operation[] = [];
  for (const [path, methods] of Object.entries(document.paths as Record<string, Record<string, any>>)) {
    const segments = path.split('/');
    const pattern = new RegExp(`^${segments.map((segment) => (segment.startsWith('{') ? '[^/]+' : segment.replace(/[.]/g, '\\.'))).join('/')}$`);
    for (const [method, operation] of Object.entries(methods)) {
      operations.push({ method: method.toUpperCase(), pattern, literalSegments: segments.filter((s) => !s.startsWith('{')).length, responses: operation.responses });
    }
  }
  // Literal segments win over parameters (/functions/ids before /functions/{id}).
  operations.sort((a, b) => b.literalSegments - a.literalSegments);

  function validatorFor(schema: object): ValidateFunction {
    let validate = compiled.get(schema);
    if (!validate) {
      validate = ajv.compile({ ...schema, components: document.components });
      compiled.set(schema, validate);
    }
    return validate;
  }

  return {
    check(method, path, status, contentType, body) {
      const operation = operations.find((candidate) => candidate.method === method && candidate.pattern.test(path.split('?')[0]));
      if (!operation) return status === 404 || status === 405 ? [] : [`${method} ${path} is not in /v3/openapi`];
      const response = operation.responses[String(status)] ?? (status >= 400 ? operation.responses.default : undefined);
      if (!response) return [`${method} ${path}: status ${status} is not documented`];
      const media = response.content && Object.entries(response.content)[0];
      if (!media) return body === undefined ? [] : [`${method} ${path} ${status}: documented without a body, got one`];
      const [documentedType, { schema }] = media;
      if (documentedType === '*/*') return [];
      if (contentType && !contentType.startsWith(documentedType)) return [`${method} ${path} ${status}: content-type ${contentType}, documented ${documentedType}`];
      if (!schema) return [];
      const validate = validatorFor(schema);
      return validate(body) ? [] : [`${method} ${path} ${status}: ${ajv.errorsText(validate.errors)}`];
    },
  };
}
